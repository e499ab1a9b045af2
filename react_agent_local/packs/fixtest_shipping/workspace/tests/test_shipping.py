from shop.shipping import order_total, shipping_cost


def test_small_orders_pay_the_standard_rate():
    assert shipping_cost(20.0) == 4.95


def test_free_shipping_starts_at_fifty():
    assert shipping_cost(50.0) == 0.0
    assert shipping_cost(80.0) == 0.0


def test_express_adds_its_surcharge():
    assert shipping_cost(20.0, express=True) == 12.45


def test_order_total():
    assert order_total([10.0, 5.5], 4.95) == 20.45
