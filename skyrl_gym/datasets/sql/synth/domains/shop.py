"""An online shop: customers place orders of products bought from suppliers."""

from __future__ import annotations

import datetime
import random
from typing import Any

from skyrl_gym.datasets.sql.synth import sampling
from skyrl_gym.datasets.sql.synth.schema import Bridge, Column, Domain, Link, Table, key, ref

CATALOGUE = {
    "Kitchen": (28, ("Kettle", "Chef's Knife", "Frying Pan", "Cutting Board", "Coffee Grinder", "Teapot",
                     "Blender", "Mixing Bowl", "Toaster", "Spice Rack", "Salad Spinner", "Dutch Oven")),
    "Garden": (35, ("Hose Reel", "Pruning Shears", "Planter", "Bird Feeder", "Watering Can", "Garden Bench",
                    "Lawn Sprinkler", "Compost Bin", "Seed Tray", "Wheelbarrow", "Hedge Trimmer")),
    "Electronics": (90, ("Headphones", "Bluetooth Speaker", "Power Bank", "Webcam", "Keyboard", "Monitor",
                         "Smartwatch", "USB Hub", "E-Reader", "Router", "Desk Lamp", "Action Camera")),
    "Toys": (22, ("Puzzle", "Building Blocks", "Plush Bear", "Kite", "Board Game", "Toy Train",
                  "Yo-Yo", "Marble Run", "Doll House", "Puppet")),
    "Sports": (40, ("Yoga Mat", "Tennis Racket", "Dumbbell Set", "Water Bottle", "Running Shoes",
                    "Cycling Helmet", "Jump Rope", "Football", "Climbing Chalk", "Swim Goggles")),
    "Office": (15, ("Notebook", "Fountain Pen", "Desk Organizer", "Stapler", "Paper Tray", "Whiteboard",
                    "Letter Opener", "Filing Box", "Planner", "Highlighter Set")),
    "Beauty": (18, ("Face Cream", "Hair Dryer", "Lip Balm", "Shampoo", "Perfume", "Nail Kit",
                    "Body Lotion", "Hand Soap", "Beard Oil")),
}  # fmt: skip
"""category -> (median price in dollars, product nouns)"""

ADJECTIVES = (
    "Classic", "Compact", "Deluxe", "Eco", "Smart", "Premium", "Vintage", "Nordic", "Urban", "Solar", "Bamboo",
    "Copper", "Pro", "Mini", "Family", "Travel", "Rustic", "Modern", "Essential", "Ultra",
)  # fmt: skip

COMPANY_WORDS = ("Atlas", "Nordic", "Harbor", "Summit", "Cedar", "Pioneer", "Blue River", "Golden Gate", "Evergreen",
                 "Northwind", "Silverline", "Redwood", "Lakeside", "Orion", "Meridian", "Sunrise")  # fmt: skip
COMPANY_KINDS = ("Trading", "Supply", "Goods", "Imports", "Wholesale", "Distribution", "Manufacturing")
COMPANY_FORMS = ("Ltd", "Inc", "Co", "GmbH", "SA", "BV")

TIERS = ("Bronze", "Silver", "Gold", "Platinum")
STATUSES = ("delivered", "shipped", "processing", "cancelled", "returned")
PAYMENTS = ("credit card", "PayPal", "bank transfer", "gift card")

customers = Table(
    "customers", "customer", "customers", person=True, label="name", primary_key=("customer_id",),
    columns=(
        key("customer_id"),
        Column("name", "VARCHAR", kind="label", noun="name"),
        Column("email", "VARCHAR", kind="text", noun="e-mail address", nullable=True,
               missing=("with no e-mail address on file", "without an e-mail address")),
        Column("city", "VARCHAR", kind="cat", noun="city", eq=("from {v}", "based in {v}", "living in {v}")),
        Column("country", "VARCHAR", kind="cat", noun="country", eq=("from {v}", "living in {v}")),
        Column("signup_date", "DATE", kind="date", noun="sign-up date",
               when=("who signed up {p}", "who registered {p}")),
        Column("loyalty_tier", "VARCHAR", kind="cat", noun="loyalty tier", nullable=True,
               eq=("in the {v} loyalty tier", "with {v} loyalty status"),
               missing=("with no loyalty tier", "not enrolled in the loyalty programme")),
    ),
)  # fmt: skip

suppliers = Table(
    "suppliers", "supplier", "suppliers", label="name", primary_key=("supplier_id",),
    columns=(
        key("supplier_id"),
        Column("name", "VARCHAR", kind="label", noun="name"),
        Column("country", "VARCHAR", kind="cat", noun="country", eq=("from {v}", "based in {v}")),
        Column("rating", "DECIMAL(2,1)", kind="num", noun="rating", nullable=True,
               gt=("rated above {v}", "with a rating above {v}"), lt=("rated below {v}", "with a rating below {v}"),
               missing=("with no rating yet", "that have not been rated"), top="best-rated", bottom="worst-rated"),
        Column("founded_year", "INTEGER", kind="year", noun="founding year", eq=("founded in {v}",),
               gt=("founded after {v}",), lt=("founded before {v}",), tense="were", top="most recently founded",
               bottom="oldest"),
    ),
)  # fmt: skip

products = Table(
    "products", "product", "products", label="name", primary_key=("product_id",),
    columns=(
        key("product_id"),
        Column("name", "VARCHAR", kind="label", noun="name"),
        Column("category", "VARCHAR", kind="cat", noun="category", eq=("in the {v} category", "from the {v} range")),
        Column("unit_price", "DECIMAL(10,2)", kind="money", noun="price",
               gt=("priced above {v}", "with a price above {v}"), lt=("priced below {v}", "with a price under {v}"),
               top="most expensive", bottom="cheapest"),
        Column("stock", "INTEGER", kind="num", noun="stock level", additive=True,
               gt=("with more than {v} units in stock",), lt=("with fewer than {v} units in stock",)),
        ref("supplier_id", "suppliers", "supplier_id"),
    ),
)  # fmt: skip

orders = Table(
    "orders", "order", "orders", label="order_id", primary_key=("order_id",),
    columns=(
        Column("order_id", "INTEGER", kind="id", noun="order ID"),
        ref("customer_id", "customers", "customer_id"),
        Column("order_date", "DATE", kind="date", noun="order date", when=("placed {p}",), tense="were"),
        Column("status", "VARCHAR", kind="cat", noun="status", eq=("with status '{v}'", "whose status is '{v}'")),
        Column("payment_method", "VARCHAR", kind="cat", noun="payment method", eq=("paid by {v}",), tense="were"),
        Column("amount", "DECIMAL(10,2)", kind="money", noun="amount", additive=True,
               gt=("worth more than {v}", "with an amount above {v}"), lt=("worth less than {v}",),
               top="largest", bottom="smallest"),
    ),
)  # fmt: skip

order_items = Table(
    "order_items", "order line", "order lines", primary_key=("order_id", "product_id"),
    columns=(
        ref("order_id", "orders", "order_id"),
        ref("product_id", "products", "product_id"),
        Column("quantity", "INTEGER", kind="num", noun="quantity", additive=True,
               gt=("with a quantity above {v}",), lt=("with a quantity below {v}",)),
        Column("unit_price", "DECIMAL(10,2)", kind="money", noun="unit price",
               gt=("at a unit price above {v}",), lt=("at a unit price below {v}",)),
    ),
)  # fmt: skip


def populate(rng: random.Random, scale: float) -> dict[str, list[tuple[Any, ...]]]:
    start = datetime.date(rng.randint(2016, 2020), 1, 1)
    end = datetime.date(start.year + rng.randint(3, 5), 12, 31)
    places = sampling.cities(rng, rng.randint(8, 16))
    place_weights = sampling.skewed_weights(rng, len(places), alpha=1.1)

    rows_customers = []
    for i, name in enumerate(sampling.people(rng, int(150 * scale)), start=1):
        city, country = rng.choices(places, weights=place_weights)[0]
        tier = sampling.maybe(rng, rng.choices(TIERS, weights=(50, 30, 15, 5))[0], 0.4)
        email = sampling.maybe(rng, sampling.email_for(rng, name), 0.06)
        signup = sampling.date_between(rng, start, end - datetime.timedelta(days=60))
        rows_customers.append((i, name, email, city, country, signup, tier))

    countries = rng.sample(sorted({c for _, c in places} | {"China", "Vietnam", "Germany", "Italy"}), 6)
    company_names = sampling.unique_strings(
        rng,
        rng.randint(8, 14),
        lambda r: f"{r.choice(COMPANY_WORDS)} {r.choice(COMPANY_KINDS)} {r.choice(COMPANY_FORMS)}",
    )
    rows_suppliers = []
    for i, name in enumerate(company_names, start=1):
        rating = sampling.maybe(rng, round(rng.uniform(2.4, 5.0), 1), 0.15)
        rows_suppliers.append((i, name, rng.choice(countries), rating, rng.randint(1952, 2021)))

    categories = sorted(CATALOGUE)
    category_weights = sampling.skewed_weights(rng, len(categories), alpha=2.0)
    supplier_weights = sampling.skewed_weights(rng, len(rows_suppliers), alpha=1.5)
    rows_products = []
    names: set[str] = set()
    while len(rows_products) < int(70 * scale):
        category = rng.choices(categories, weights=category_weights)[0]
        median, nouns = CATALOGUE[category]
        name = f"{rng.choice(ADJECTIVES)} {rng.choice(nouns)}"
        if name in names:
            continue
        names.add(name)
        stock = int(rng.lognormvariate(3.5, 1.0)) if rng.random() > 0.08 else 0
        supplier = rng.choices(rows_suppliers, weights=supplier_weights)[0][0]
        rows_products.append(
            (len(rows_products) + 1, name, category, sampling.price(rng, median), stock, supplier)
        )

    customer_weights = sampling.skewed_weights(rng, len(rows_customers), alpha=1.2, idle=0.15)
    product_weights = sampling.skewed_weights(rng, len(rows_products), alpha=1.1, idle=0.05)
    rows_orders, rows_items = [], []
    for order_id in range(1, int(500 * scale) + 1):
        customer = rng.choices(rows_customers, weights=customer_weights)[0]
        day = sampling.date_between(rng, customer[5], end)
        status = rng.choices(STATUSES, weights=(70, 8, 4, 10, 8))[0]
        payment = rng.choices(PAYMENTS, weights=(55, 25, 12, 8))[0]
        lines = min(len(rows_products), rng.choices((1, 2, 3, 4, 5), weights=(40, 28, 16, 10, 6))[0])
        chosen: dict[int, tuple[Any, ...]] = {}
        while len(chosen) < lines:
            product = rng.choices(rows_products, weights=product_weights)[0]
            chosen[product[0]] = product
        amount = 0.0
        for product_id, product in sorted(chosen.items()):
            quantity = rng.choices((1, 2, 3, 4, 6), weights=(60, 22, 9, 6, 3))[0]
            unit_price = product[3] if rng.random() > 0.15 else round(product[3] * 0.9, 2)
            amount += quantity * unit_price
            rows_items.append((order_id, product_id, quantity, unit_price))
        rows_orders.append((order_id, customer[0], day, status, payment, round(amount, 2)))
    rows_orders, new_id = sampling.renumber(rows_orders, 2)
    rows_items = sorted((new_id[row[0]], *row[1:]) for row in rows_items)

    return {
        "customers": rows_customers,
        "suppliers": rows_suppliers,
        "products": rows_products,
        "orders": rows_orders,
        "order_items": rows_items,
    }


DOMAIN = Domain(
    name="shop",
    description="an online shop: customers, suppliers, products, orders and their order lines",
    tables=(customers, suppliers, products, orders, order_items),
    links=(
        Link("orders", "customer_id", "customers", verb="placed", by="placed by", never="have never placed an order",
             when="order_date"),
        Link("products", "supplier_id", "suppliers", verb="supply", by="supplied by",
             never="have no products in the catalogue"),
        Link("order_items", "product_id", "products", verb="appear in", by="for", never="have never been ordered"),
        Link("order_items", "order_id", "orders", verb="contain", by="in", never="have no order lines"),
    ),
    bridges=(
        Bridge("order_items", "orders", "order_id", "products", "product_id", verb="contain", by="contained in"),
    ),
    populate=populate,
)  # fmt: skip
