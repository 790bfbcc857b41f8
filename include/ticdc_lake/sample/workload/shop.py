"""The realistic profile's upstream: a web shop's tables, and values that read like a shop's.

Six tables hold every column type of `cases.COLUMN_TYPES` (by type code and flags; enums and
sets with a shop's own elements), with the same kinds of handle as the edge-case tables: integer
primary keys, a composite primary key, a NOT NULL unique key, and a hash-partitioned table.
Values are plausible (names, e-mails, amounts, statuses, timestamps a little before the commit
that writes them); NULL only where a shop would leave a column empty. `ShopValues` draws them
from the generator's seeded random source and clock, so a seed keeps its workload.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import random
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ticdc_lake.sample.cases import BY_NAME, ColumnType, format_decimal, fraction
from ticdc_lake.sample.workload.tables import UNIQUE, ColumnDef, TableDef
from ticdc_lake.silver import mysql

FIRST_NAMES = (
    "Anna", "Ben", "Chloé", "David", "Emma", "Felix", "Grace", "Hiro", "Ines", "Jonas", "Karin",
    "Liam", "Maria", "Noah", "Olivia", "Pablo", "Quinn", "Rosa", "Sven", "Tariq", "Uma", "Vera",
    "Wei", "Yusuf", "Zoë", "Lucas", "Mia", "Ali", "Sofia", "Jan",
)  # fmt: skip
LAST_NAMES = (
    "Müller", "Smith", "García", "Rossi", "Nowak", "Jensen", "Tanaka", "Dubois", "Silva", "Kim",
    "O'Brien", "Novák", "Schmidt", "Brown", "Lopez", "Weber", "Chen", "Ivanova", "Costa", "Berg",
)  # fmt: skip
MAIL_DOMAINS = ("gmail.com", "outlook.com", "yahoo.com", "web.de", "proton.me", "icloud.com")
COUNTRIES = ("DE", "US", "FR", "GB", "NL", "ES", "IT", "PL", "SE", "JP", "BR", "CN")
CURRENCIES = ("EUR", "USD", "GBP", "JPY", "SEK", "PLN")
PRODUCTS = (
    "Espresso Cup", "Linen Shirt", "Trail Shoes", "Desk Lamp", "Yoga Mat", "Backpack 22L",
    "Wool Scarf", "Water Bottle", "Notebook A5", "Headphones", "Coffee Beans 1kg", "Chef Knife",
)  # fmt: skip
PAGES = ("/", "/cart", "/checkout", "/search?q=shoes", "/p/{sku}", "/account", "/help/returns")
USER_AGENTS = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/126.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 Version/17.5 Safari",
    "Mozilla/5.0 (X11; Linux x86_64; rv:127.0) Gecko/20100101 Firefox/127.0",
)
ORDER_STATUSES = ("pending", "paid", "shipped", "delivered", "cancelled", "refunded")
TIERS = ("bronze", "silver", "gold", "platinum")
PAYMENT_METHODS = ("card", "paypal", "sepa", "klarna", "apple_pay")
TAGS = ("new", "sale", "eco", "bestseller")


def _enum(name: str, elements: tuple[str, ...]) -> ColumnType:
    quoted = ",".join(f"'{element}'" for element in elements)
    return ColumnType(name, f"enum({quoted})", mysql.TYPE_ENUM, 0)


def _set(name: str, elements: tuple[str, ...]) -> ColumnType:
    quoted = ",".join(f"'{element}'" for element in elements)
    return ColumnType(name, f"set({quoted})", mysql.TYPE_SET, 0)


def _column(name: str, type_name: str | ColumnType, nullable: bool = True) -> ColumnDef:
    column_type = BY_NAME[type_name] if isinstance(type_name, str) else type_name
    return ColumnDef(name, column_type, nullable=nullable)


def shop_tables() -> tuple[TableDef, ...]:
    """The realistic profile's tables (ids as TiDB might have given them)."""
    return (_customers(), _products(), _orders(), _order_items(), _payments(), _page_views())


def _customers() -> TableDef:
    return TableDef.build(
        "customers",
        200,
        [
            _column("id", "c_bigint", False),
            _column("name", "c_varchar", False),
            _column("email", "c_varchar", False),
            _column("country", "c_char"),
            _column("tier", _enum("tier", TIERS), False),
            _column("newsletter", "c_bool", False),
            _column("birth_date", "c_date"),
            _column("loyalty_points", "c_int_unsigned", False),
            _column("consents", "c_bit"),
            _column("preferences", "c_json"),
            _column("created_at", "c_timestamp", False),
        ],
        ("id",),
    )


def _products() -> TableDef:
    return TableDef.build(
        "products",
        210,
        [
            _column("sku", "c_varchar", False),
            _column("title", "c_tinytext", False),
            _column("description", "c_text"),
            _column("spec_sheet", "c_mediumtext"),
            _column("rating", "c_tinyint_unsigned"),
            _column("stock", "c_mediumint_unsigned", False),
            _column("weight_kg", "c_float"),
            _column("launch_year", "c_year"),
            _column("tags", _set("tags", TAGS)),
            _column("thumbnail", "c_tinyblob"),
            _column("image", "c_blob"),
        ],
        ("sku",),
        key_kind=UNIQUE,
    )


def _orders() -> TableDef:
    return TableDef.build(
        "orders",
        220,
        [
            _column("id", "c_bigint", False),
            _column("customer_id", "c_bigint", False),
            _column("status", _enum("status", ORDER_STATUSES), False),
            _column("total", "c_decimal", False),
            _column("currency", "c_char", False),
            _column("placed_at", "c_datetime6", False),
            _column("updated_at", "c_timestamp", False),
            _column("note", "c_text"),
            _column("invoice_pdf", "c_longblob"),
        ],
        ("id",),
        partitions=4,
    )


def _order_items() -> TableDef:
    return TableDef.build(
        "order_items",
        230,
        [
            _column("order_id", "c_bigint_unsigned", False),
            _column("line_no", "c_int", False),
            _column("sku", "c_varchar", False),
            _column("qty", "c_smallint_unsigned", False),
            _column("unit_price_cents", "c_decimal_int", False),
        ],
        ("order_id", "line_no"),
    )


def _payments() -> TableDef:
    return TableDef.build(
        "payments",
        240,
        [
            _column("id", "c_bigint", False),
            _column("order_id", "c_bigint", False),
            _column("method", _enum("method", PAYMENT_METHODS), False),
            _column("amount", "c_decimal", False),
            _column("fx_rate", "c_decimal_wide"),
            _column("fee_bps", "c_smallint"),
            _column("card_fingerprint", "c_binary"),
            _column("provider_token", "c_varbinary"),
            _column("receipt", "c_mediumblob"),
            _column("paid_at", "c_datetime6"),
        ],
        ("id",),
    )


def _page_views() -> TableDef:
    return TableDef.build(
        "page_views",
        250,
        [
            _column("id", "c_bigint", False),
            _column("customer_id", "c_bigint"),
            _column("url", "c_varchar", False),
            _column("user_agent", "c_longtext"),
            _column("viewed_at", "c_datetime", False),
            _column("viewed_on", "c_date", False),
            _column("dwell", "c_time"),
            _column("load_ms", "c_mediumint"),
            _column("tz_offset_h", "c_tinyint"),
            _column("latitude", "c_double"),
            _column("longitude", "c_double"),
            _column("session_year", "c_year"),
            _column("session_blob", "c_longblob"),
        ],
        ("id",),
    )


# Table ids a tenant's tables are apart from the tenant's before (TiDB's ids are unique).
TENANT_ID_STEP = 1000


def tenant_tables(tables: tuple[TableDef, ...], tenants: int) -> tuple[TableDef, ...]:
    """``tables`` and a copy of them for each further tenant, in schemas ``shop_2`` to
    ``shop_<tenants>`` (a SaaS database: one schema per customer, the same tables in each)."""
    copies = [
        dataclasses.replace(
            table,
            schema=f"{table.schema}_{tenant}",
            table_id=table.table_id + TENANT_ID_STEP * (tenant - 1),
            partition_ids=tuple(p + TENANT_ID_STEP * (tenant - 1) for p in table.partition_ids),
        )
        for tenant in range(2, tenants + 1)
        for table in tables
    ]
    return (*tables, *copies)


def covered_types(tables: tuple[TableDef, ...]) -> set[tuple[int, int]]:
    """(type code, type flags) of every column: what `cases.COLUMN_TYPES` must all be among."""
    return {(c.type_code, c.column_type.flags) for t in tables for c in t.columns}


# Columns the realistic DDLs add (ALTER TABLE ... ADD COLUMN), in order.
# The realistic profile's CHANGE COLUMN: a rename and a wider type that holds every value.
CHANGED_COLUMN = ("shop.order_items", "qty", _column("quantity", "c_int_unsigned", False))
ADDED_COLUMNS = (
    ("shop.customers", _column("phone", "c_varchar")),
    ("shop.orders", _column("coupon_code", "c_varchar")),
)

# Per column: the share of NULLs (absent: never NULL) and what an UPDATE may change.
NULL_SHARE = {
    "country": 0.02, "birth_date": 0.3, "consents": 0.1, "preferences": 0.4,
    "description": 0.1, "spec_sheet": 0.5, "rating": 0.3, "weight_kg": 0.1, "launch_year": 0.2,
    "tags": 0.3, "thumbnail": 0.3, "image": 0.6, "note": 0.8, "invoice_pdf": 0.7,
    "fx_rate": 0.6, "fee_bps": 0.1, "card_fingerprint": 0.4, "provider_token": 0.2,
    "receipt": 0.7, "paid_at": 0.3, "customer_id": 0.3, "user_agent": 0.05, "dwell": 0.2,
    "load_ms": 0.05, "tz_offset_h": 0.05, "latitude": 0.3, "longitude": 0.3,
    "session_year": 0.5, "session_blob": 0.9, "phone": 0.3, "coupon_code": 0.8,
}  # fmt: skip
# The columns an UPDATE changes. Not a customer's e-mail: it is made of the name inserted with
# it, and one drawn again would belong to somebody else.
# By table name: every tenant's shop (`tenant_tables`) alike.
UPDATED = {
    "customers": ("tier", "newsletter", "loyalty_points", "consents", "preferences", "phone"),
    "products": ("stock", "rating", "tags", "description", "image"),
    "orders": ("status", "updated_at", "note", "invoice_pdf", "total"),
    "order_items": ("qty", "unit_price_cents"),
    "payments": ("paid_at", "receipt", "fee_bps", "provider_token"),
    "page_views": ("dwell", "load_ms", "session_blob"),
}

# Columns that name another table's row, and that table: drawn from the keys it holds.
REFERENCES = {"customer_id": "shop.customers", "order_id": "shop.orders"}


class LiveKeys(Protocol):
    """The keys a table holds now (the generator's key pool)."""

    def __len__(self) -> int: ...
    def choice(self, rng: random.Random) -> tuple: ...


@dataclass
class _Draws:
    """What the shop's values are drawn from: the generator's random source and clock, and the
    keys of the tables that columns refer to."""

    rng: random.Random
    clock_ms: Callable[[], int]  # the simulated commit time: timestamps fall shortly before it
    last_name: tuple[str, str] | None = None  # a customer's name, for the e-mail drawn next
    # Per column of REFERENCES, the keys its table holds (the generator sets them): an order's
    # customer and a payment's order exist, as in a shop's database.
    referred: dict[str, LiveKeys] = field(default_factory=dict)

    def _moment(self, before_s: float) -> dt.datetime:
        """A moment up to `before_s` seconds before the clock, UTC, to the microsecond."""
        micros = self.clock_ms() * 1000 - int(self.rng.random() * before_s * 1_000_000)
        return dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=micros)

    def _text_time(self, before_s: float, fsp: int) -> str:
        moment = self._moment(before_s)
        return moment.strftime("%Y-%m-%d %H:%M:%S") + fraction(fsp, moment.microsecond)

    def _person(self) -> tuple[str, str]:
        first, last = self.rng.choice(FIRST_NAMES), self.rng.choice(LAST_NAMES)
        return first, last

    def _money(self, low: int, high: int, scale: int = 6) -> str:
        cents = self.rng.randint(low * 100, high * 100)
        return format_decimal(cents * 10 ** (scale - 2), scale)

    def _reference(self, column: str, most: int) -> int:
        """A key the referred table holds now; any up to `most` while it holds none."""
        keys = self.referred.get(column)
        if keys:
            return keys.choice(self.rng)[0]
        return self.rng.randint(1, most)

    def _bytes(self, magic: bytes, low: int, high: int) -> bytes:
        return magic + self.rng.randbytes(self.rng.randint(low, high))

    def _sku(self) -> str:
        """An order line's product, and the one a product page shows."""
        return f"SKU-{self.rng.randint(1, 99_999):06d}"


class _CustomerValues(_Draws):
    """Customers' columns."""

    def _name(self) -> str:
        self.last_name = self._person()
        return " ".join(self.last_name)

    def _email(self) -> str:
        """An address made of the name just drawn for the same row (or of another one)."""
        first, last = self.last_name or self._person()
        self.last_name = None
        plain = unicodedata.normalize("NFKD", f"{first}.{last}").encode("ascii", "ignore")
        local = plain.decode().lower().replace("'", "")
        return f"{local}{self.rng.randint(1, 999)}@{self.rng.choice(MAIL_DOMAINS)}"

    def _country(self) -> str:
        return self.rng.choice(COUNTRIES)

    def _tier(self) -> int:
        return self.rng.choices((1, 2, 3, 4), (60, 25, 12, 3))[0]

    def _newsletter(self) -> int:
        return int(self.rng.random() < 0.4)

    def _birth_date(self) -> str:
        day = dt.date(1950, 1, 1) + dt.timedelta(days=self.rng.randint(0, 20_000))
        return day.isoformat()

    def _loyalty_points(self) -> int:
        return int(self.rng.expovariate(1 / 800))

    def _consents(self) -> int:
        return self.rng.getrandbits(10)

    def _preferences(self) -> str:
        document = {
            "language": self.rng.choice(("en", "de", "fr", "ja", "es")),
            "dark_mode": self.rng.random() < 0.5,
            "sizes": self.rng.sample(("S", "M", "L", "XL"), 2),
        }
        return json.dumps(document, separators=(", ", ": "))

    def _created_at(self) -> str:
        return self._text_time(5, 3)

    def _phone(self) -> str:
        return f"+{self.rng.choice((1, 33, 44, 49, 81))} {self.rng.randint(100, 999)} " + str(
            self.rng.randint(1_000_000, 9_999_999)
        )


class _ProductValues(_Draws):
    """Products' columns."""

    def _title(self) -> str:
        colour = self.rng.choice(("black", "navy", "olive", "sand", "white", "red"))
        return f"{self.rng.choice(PRODUCTS)}, {colour}"

    def _description(self) -> str:
        return (
            f"{self._title()}. Ships in {self.rng.randint(1, 5)} days; "
            f"free returns within {self.rng.choice((14, 30))} days."
        )

    def _spec_sheet(self) -> str:
        return "\n".join(
            f"{label}: {self.rng.randint(1, 99)} {unit}"
            for label, unit in (("Width", "cm"), ("Height", "cm"), ("Weight", "g"))
        )

    def _rating(self) -> int:
        return self.rng.choices((1, 2, 3, 4, 5), (3, 5, 15, 40, 37))[0]

    def _stock(self) -> int:
        return self.rng.randint(0, 2_500)

    def _weight_kg(self) -> float:
        return mysql.float32(round(self.rng.uniform(0.05, 12.0), 2))

    def _launch_year(self) -> int:
        return self.rng.randint(2012, 2024)

    def _tags(self) -> int:
        return self.rng.getrandbits(len(TAGS))

    def _thumbnail(self) -> bytes:
        return self._bytes(b"\x89PNG\r\n\x1a\n", 8, 40)

    def _image(self) -> bytes:
        return self._bytes(b"\xff\xd8\xff\xe0", 32, 200)


class _OrderValues(_Draws):
    """Orders' and their lines' columns."""

    def _customer_id(self) -> int:
        return self._reference("customer_id", 50_000)

    def _status(self) -> int:
        return self.rng.choices((1, 2, 3, 4, 5, 6), (30, 35, 20, 10, 4, 1))[0]

    def _total(self) -> str:
        return self._money(5, 900)

    def _currency(self) -> str:
        return self.rng.choices(CURRENCIES, (50, 25, 10, 5, 5, 5))[0]

    def _placed_at(self) -> str:
        return self._text_time(2, 6)

    def _updated_at(self) -> str:
        return self._text_time(1, 3)

    def _note(self) -> str:
        return self.rng.choice(
            ("Leave at the door", "Gift, no invoice in the box", "Call before delivery", "")
        )

    def _invoice_pdf(self) -> bytes:
        return self._bytes(b"%PDF-1.7\n", 64, 256)

    def _qty(self) -> int:
        return self.rng.choices((1, 2, 3, 4, 10), (70, 18, 6, 4, 2))[0]

    _quantity = _qty  # its name after the profile's CHANGE COLUMN

    def _unit_price_cents(self) -> str:
        return str(self.rng.randint(199, 49_999))

    def _coupon_code(self) -> str:
        return f"{self.rng.choice(('SPRING', 'WELCOME', 'VIP'))}{self.rng.randint(5, 30)}"


class _PaymentValues(_Draws):
    """Payments' columns."""

    def _order_id(self) -> int:
        return self._reference("order_id", 200_000)

    def _method(self) -> int:
        return self.rng.choices((1, 2, 3, 4, 5), (55, 20, 10, 10, 5))[0]

    def _amount(self) -> str:
        return self._money(5, 900)

    def _fx_rate(self) -> str:
        return format_decimal(self.rng.randint(80 * 10**28, 160 * 10**28), 30)

    def _fee_bps(self) -> int:
        return self.rng.randint(-50, 350)

    def _card_fingerprint(self) -> bytes:
        return self.rng.randbytes(8)

    def _provider_token(self) -> bytes:
        return self.rng.randbytes(self.rng.choice((16, 24, 32)))

    def _receipt(self) -> bytes:
        return self._bytes(b"%PDF-1.4\n", 32, 128)

    def _paid_at(self) -> str:
        return self._text_time(30, 6)


class _PageViewValues(_Draws):
    """Page views' columns."""

    def _url(self) -> str:
        return self.rng.choice(PAGES).format(sku=self._sku())

    def _user_agent(self) -> str:
        return self.rng.choice(USER_AGENTS)

    def _viewed_at(self) -> str:
        return self._text_time(1, 0)

    def _viewed_on(self) -> str:
        return self._moment(1).date().isoformat()

    def _dwell(self) -> str:
        seconds = int(self.rng.expovariate(1 / 45))
        minutes, seconds = divmod(min(seconds, 3599), 60)
        return f"00:{minutes:02d}:{seconds:02d}" + fraction(2, self.rng.randint(0, 999_999))

    def _load_ms(self) -> int:
        return int(self.rng.lognormvariate(5.5, 0.6))

    def _tz_offset_h(self) -> int:
        return self.rng.choice((-8, -5, 0, 1, 2, 9))

    def _latitude(self) -> float:
        return round(self.rng.uniform(-55, 70), 6)

    def _longitude(self) -> float:
        return round(self.rng.uniform(-150, 150), 6)

    def _session_year(self) -> int:
        return self._moment(1).year

    def _session_blob(self) -> bytes:
        return self._bytes(b"\x1f\x8b\x08\x00", 16, 64)


@dataclass
class ShopValues(_CustomerValues, _ProductValues, _OrderValues, _PaymentValues, _PageViewValues):
    """Plausible values per column, drawn from the generator's random source at its clock.

    Each table's columns are a class of their own; a column's values are the method named after
    it (`source`)."""

    def null_share(self, column: ColumnDef) -> float:
        return NULL_SHARE.get(column.name, 0.0) if column.nullable else 0.0

    def source(self, column: ColumnDef) -> Callable[[], Any]:
        maker = getattr(self, f"_{column.name}", None)
        if maker is None:
            raise KeyError(f"the shop has no values for column {column.name!r}")
        return maker
