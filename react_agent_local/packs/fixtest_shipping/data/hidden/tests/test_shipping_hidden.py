from shop.shipping import shipping_cost


def test_express_at_the_threshold_pays_only_the_surcharge():
    assert shipping_cost(50.0, express=True) == 7.5


def test_just_below_the_threshold():
    assert shipping_cost(49.99) == 4.95
