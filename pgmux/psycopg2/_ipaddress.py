"""psycopg2._ipaddress: inet and cidr as ``ipaddress`` objects (``register_ipaddress``)."""

from __future__ import annotations

import ipaddress
from typing import Any

from pgmux.psycopg2._adapt import QuotedString, register_adapter
from pgmux.psycopg2._casters import new_array_type, new_type, register_type

_casters: Any = None


def register_ipaddress(conn_or_curs: Any = None) -> None:
    """Read inet as ``ip_interface`` and cidr as ``ip_network`` (on ``conn_or_curs``, or
    everywhere), and send ``ipaddress`` objects as their text."""
    global _casters
    if _casters is None:
        _casters = _make_casters()
    for caster in _casters:
        register_type(caster, conn_or_curs)
    for cls in (ipaddress.IPv4Address, ipaddress.IPv6Address, ipaddress.IPv4Interface,
                ipaddress.IPv6Interface, ipaddress.IPv4Network, ipaddress.IPv6Network):
        register_adapter(cls, adapt_ipaddress)


def _make_casters() -> tuple[Any, ...]:
    inet = new_type((869,), "INET", cast_interface)
    ainet = new_array_type((1041,), "INET[]", inet)
    cidr = new_type((650,), "CIDR", cast_network)
    acidr = new_array_type((651,), "CIDR[]", cidr)
    return inet, cidr, ainet, acidr


def cast_interface(s: str | None, cur: Any = None) -> Any:
    return None if s is None else ipaddress.ip_interface(s)


def cast_network(s: str | None, cur: Any = None) -> Any:
    return None if s is None else ipaddress.ip_network(s)


def adapt_ipaddress(obj: Any) -> QuotedString:
    return QuotedString(str(obj))
