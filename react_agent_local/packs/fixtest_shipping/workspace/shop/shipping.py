"""Shipping costs of an order."""

FREE_SHIPPING_FROM = 50.0
STANDARD_RATE = 4.95
EXPRESS_SURCHARGE = 7.5


def shipping_cost(order_total, express=False):
    """Free for orders of FREE_SHIPPING_FROM or more, else the standard rate; express delivery
    always adds its surcharge."""
    cost = 0.0 if order_total > FREE_SHIPPING_FROM else STANDARD_RATE
    if express:
        cost += EXPRESS_SURCHARGE
    return round(cost, 2)


def order_total(prices, shipping):
    """What the customer pays: the items and the shipping."""
    return round(sum(prices) + shipping, 2)
