"""TypeRegistry: decoders by type OID, encoders by Python class, for one client.

Theory of operation. Everything on the hot path is one dict lookup:

* decoding: ``text_decoder(oid)`` / ``binary_decoder(oid)`` / ``result_format(oid)``
  read ``oid -> callable`` tables; unknown OIDs decode to ``str``. Types built from
  others (arrays, ranges, multiranges, composites, domains: the *derived* types) get
  decoders that fetch their parts' decoders at call time, so registering an element
  type also decodes its arrays; ``_refresh_derived`` reinstalls them after every change,
  binary only where every part reads binary.
  ``version`` counts the changes, so whoever caches decoders (a result shape) knows
  when to look again; ``text_decoders_for_styles`` gives the date/time/interval text
  decoders for a session's DateStyle and IntervalStyle (``styles``).
* encoding: ``encode_params`` looks up ``type(value)`` in ``_param_encoders``. A miss
  (a subclass, an unsupported type) walks the class's MRO once against the classes
  registered explicitly and caches the answer under the subclass.

Parameters carry type OIDs: int is int4 / int8 / numeric by value, str is unknown (0)
so the server infers its type, bytes / float / UUID go in binary, the rest in text.
Because an int's OID depends on its size, a statement cache must key on the OIDs too.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import uuid
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from pgmux._native import extension as native_extension
from pgmux.errors import InterfaceError
from pgmux.types import arrays, binary, composites, hstore, oids, ranges, styles, text
from pgmux.types.composites import Factory
from pgmux.types.hstore import Hstore
from pgmux.types.introspect import (
    BASE,
    COMPOSITE,
    DOMAIN,
    ENUM,
    FIRST_USER_OID,
    MULTIRANGE,
    RANGE,
    TypeInfo,
)
from pgmux.types.ranges import Multirange, Range
from pgmux.types.temporal import Interval
from pgmux.types.text import Decoder, Dumper, Json, ParamEncoder

_NULL_PARAM = (0, 0, None)
_decode_str = text.decode_str

TEXT_DECODERS: dict[int, Decoder] = {
    oids.BOOL: text.decode_bool,
    oids.INT2: text.decode_int,
    oids.INT4: text.decode_int,
    oids.INT8: text.decode_int,
    oids.OID: text.decode_int,
    oids.XID: text.decode_int,
    oids.CID: text.decode_int,
    oids.XID8: text.decode_int,
    oids.FLOAT4: text.decode_float,
    oids.FLOAT8: text.decode_float,
    oids.NUMERIC: text.decode_numeric,
    oids.BYTEA: text.decode_bytea,
    oids.DATE: text.decode_date,
    oids.TIME: text.decode_time,
    oids.TIMETZ: text.decode_time,
    oids.TIMESTAMP: text.decode_timestamp,
    oids.TIMESTAMPTZ: text.decode_timestamptz,
    oids.INTERVAL: text.decode_interval,
    oids.UUID: text.decode_uuid,
    oids.JSON: text.decode_json,
    oids.JSONB: text.decode_json,
    oids.INET: text.decode_inet,
    oids.CIDR: text.decode_cidr,
}  # everything else, reg* types included, decodes to str

DUMPERS: dict[type, Dumper] = {
    bool: text.dump_bool,
    int: text.dump_int,
    float: text.dump_float,
    Decimal: text.dump_decimal,
    str: text.dump_str,
    bytes: text.dump_bytes,
    bytearray: text.dump_bytes,
    memoryview: text.dump_bytes,
    dt.date: text.dump_date,
    dt.datetime: text.dump_datetime,
    dt.time: text.dump_time,
    dt.timedelta: text.dump_timedelta,
    Interval: text.dump_interval,
    uuid.UUID: text.dump_uuid,
    ipaddress.IPv4Address: text.dump_inet,
    ipaddress.IPv6Address: text.dump_inet,
    ipaddress.IPv4Interface: text.dump_inet,
    ipaddress.IPv6Interface: text.dump_inet,
    ipaddress.IPv4Network: text.dump_cidr,
    ipaddress.IPv6Network: text.dump_cidr,
    Json: text.dump_json,
    Hstore: hstore.dump_hstore,
}

# Parameter encoders that are not "the dumper's text, in text format".
SPECIAL_PARAMS: dict[type, ParamEncoder] = {
    type(None): lambda value: _NULL_PARAM,
    bool: {True: (oids.BOOL, 0, b"t"), False: (oids.BOOL, 0, b"f")}.__getitem__,
    int: text.param_int,
    str: text.param_str,
    float: binary.param_float8,
    bytes: binary.param_bytea,
    bytearray: binary.param_bytea,
    memoryview: binary.param_bytea,
    uuid.UUID: binary.param_uuid,
    Hstore: text.checked_param_from_dumper(hstore.dump_hstore),
}

_UNENCODABLE_HINTS: dict[type, str] = {
    dict: "; wrap it in pgmux.types.Json to send JSON (pgmux.types.Hstore for hstore)",
    tuple: "; pass a list to send an array",
    set: "; pass a list to send an array",
}


class TypeRegistry:
    """Codecs by type OID (decoding) and by Python class (encoding)."""

    def __init__(self) -> None:
        self.version = 0  # bumped by every register() / register_array()
        self._text: dict[int, Decoder] = dict(TEXT_DECODERS)
        self._custom_text: set[int] = set()  # OIDs with a text decoder given to register()
        self._binary: dict[int, Decoder] = dict(binary.DECODERS)
        self._formats: dict[int, int] = dict.fromkeys(binary.BINARY_RESULTS, 1)
        # array oid -> (element oid, delimiter); element oid -> array oid
        self._arrays: dict[int, tuple[int, str]] = {}
        self._array_of: dict[int, int] = {}
        self._delimiters: dict[int, str] = {}
        for oid, array_oid, delim in oids.TYPES.values():
            if array_oid:
                self._arrays[array_oid] = (oid, delim)
                self._array_of[oid] = array_oid
                self._delimiters[oid] = delim
        self._learned: set[int] = set()  # OIDs looked up at run time (see ``learn``)
        self._vanished: set[int] = set()  # of those, the ones the server no longer had
        # OIDs a lookup inside a transaction block did not find: its snapshot may predate
        # them (REPEATABLE READ, SERIALIZABLE), so they are asked again ``outside`` it
        self.unseen: set[int] = set()
        # The lookup out of any transaction (the client's multiplexed connections): (OIDs,
        # whether the server has multiranges) -> what pg_type says of them and of what they
        # are made of; None: nothing to ask
        self.outside: Callable[[tuple[int, ...], bool], Sequence[TypeInfo]] | None = None
        # Derived types other than arrays: range -> subtype, multirange -> range,
        # domain -> base, composite -> (typname, field type oids).
        self._ranges: dict[int, int] = dict(ranges.BUILTIN_RANGES)
        self._multiranges: dict[int, int] = dict(ranges.BUILTIN_MULTIRANGES)
        self._domains: dict[int, int] = {}
        self._composites: dict[int, tuple[str, tuple[int, ...]]] = {}
        self._factories: dict[str | int, Factory] = {}  # register_composite(): name/oid ->
        self._composite_classes: set[type] = set()  # classes sent as composites
        self._class_dumpers: dict[type, Dumper] = dict(DUMPERS)
        self._class_params: dict[type, ParamEncoder] = {
            cls: text.param_from_dumper(dump) for cls, dump in DUMPERS.items()
        }
        self._class_params.update(SPECIAL_PARAMS)
        self._reset_encoder_caches()
        self._refresh_derived()

    # -- decoding --------------------------------------------------------------------------

    def text_decoder(self, oid: int) -> Decoder:
        """The text-format decoder of a type; ``str`` decoding for unknown OIDs."""
        return self._text.get(oid, _decode_str)

    def binary_decoder(self, oid: int) -> Decoder | None:
        """The binary-format decoder of a type, or None: then ask for text."""
        return self._binary.get(oid)

    def result_format(self, oid: int) -> int:
        """The format (0 text, 1 binary) to request for a result column of this type."""
        return self._formats.get(oid, 0)

    def knows(self, oid: int) -> bool:
        """Whether a column of type ``oid`` decodes as that type: a built-in one, a
        registered one, or one looked up already (``learn``). Any other wants a lookup."""
        return oid < FIRST_USER_OID or oid in self._text or oid in self._learned

    # -- types met at run time -------------------------------------------------------------

    def learn(self, infos: Sequence[TypeInfo], asked: Sequence[int] = (),
              in_transaction: bool = False) -> None:
        """Install codecs for types looked up in ``pg_type`` (``pgmux.types.introspect``):
        enums decode as ``str``, domains as their base type, arrays of anything known as
        lists, ranges as ``Range``, multiranges as ``Multirange``, composites as tuples
        (or what ``register_composite`` gave for them), hstore as ``dict``; the array
        type of each (``typarray``) with it. A codec given to ``register`` wins.
        ``asked``: the OIDs the lookup was for; one the server no longer has is
        ``vanished`` (its values already read cannot be decoded; no second lookup), unless
        the lookup ran ``in_transaction``: its snapshot may predate a type another session
        created since, so the OIDs it did not find are ``unseen``, for ``learn_unseen``."""
        self.version += 1
        by_oid = {info.oid: info for info in infos}
        if in_transaction and not by_oid.keys() >= set(asked):
            self.unseen.update(oid for oid in asked if oid not in by_oid)
            asked = [oid for oid in asked if oid in by_oid]
        for info in infos:
            self._learned.add(info.oid)
            if info.oid in self._custom_text or info.oid < FIRST_USER_OID:
                continue  # the user's codec, or a built-in type we know as text
            if info.is_array:
                element = by_oid.get(info.element)
                delimiter = element.delimiter if element is not None else ","
                self._arrays[info.oid] = (info.element, delimiter)
                self._array_of.setdefault(info.element, info.oid)
                self._delimiters.setdefault(info.element, delimiter)
            elif info.kind == ENUM:
                self._text[info.oid] = _decode_str
                self._binary[info.oid] = _decode_str  # an enum's binary form is its label
                self._formats[info.oid] = 1
            elif info.kind == DOMAIN:
                self._domains[info.oid] = info.base
            elif info.kind == RANGE:
                self._ranges[info.oid] = info.subtype
            elif info.kind == MULTIRANGE:
                self._multiranges[info.oid] = info.subtype
            elif info.kind == COMPOSITE:
                self._composites[info.oid] = (info.name, tuple(oid for _, oid in info.fields))
            elif info.kind == BASE and info.name == "hstore":
                self._text[info.oid] = hstore.decode_hstore_text
                self._binary[info.oid] = hstore.decode_hstore_binary
                self._formats[info.oid] = 1
            if info.array and not info.is_array and info.array not in self._custom_text:
                self._arrays.setdefault(info.array, (info.oid, info.delimiter))  # its array
                self._array_of.setdefault(info.oid, info.array)  # type too, without a lookup
                self._delimiters.setdefault(info.oid, info.delimiter)
        self._learned.update(asked)
        self._vanished.update(set(asked) - by_oid.keys())
        self._refresh_derived()

    def register_composite(self, name_or_oid: str | int, factory: Factory) -> None:
        """Decode the composite type ``name_or_oid`` (its ``typname``, or its OID) with
        ``factory(*fields)`` instead of as a tuple: a namedtuple class, a dataclass, any
        callable. When ``factory`` is a class, its instances (a tuple or a dataclass) are
        sent as parameters in the record syntax, typed by the context (``$1::name``).
        It applies once the type is met (or now, if it was)."""
        self.version += 1
        self._factories[name_or_oid] = factory
        if isinstance(factory, type):
            self._composite_classes.add(factory)
            self._reset_encoder_caches()
        self._refresh_derived()

    def learn_unseen(self, multiranges: bool = True) -> None:
        """Look the types lookups inside a transaction did not find up out of it
        (``outside``) and learn what is found; what is not found there is ``vanished``, as
        is everything with nothing to ask (``outside`` None). ``multiranges``: the server
        has them (14+)."""
        unseen, self.unseen = tuple(sorted(self.unseen)), set()
        if unseen:
            outside = self.outside
            self.learn(outside(unseen, multiranges) if outside is not None else (), unseen)

    def vanished(self, oid: int) -> bool:
        """Whether type ``oid`` was looked up and the server no longer had it (dropped
        after a result of it was read): its values cannot be read as their type."""
        return oid in self._vanished

    def text_decoders_for_styles(self, datestyle: str, intervalstyle: str) -> dict[int, Decoder]:
        """Text decoders of date, time, timetz, timestamp, timestamptz, interval, the ranges
        and multiranges over them, and the arrays of all these, for output in these styles
        (as ParameterStatus reports them: "SQL, DMY", "sql_standard"), giving the values
        the ISO / postgres decoders give.

        Where the text cannot tell the value (timestamptz outside DateStyle ISO shows a
        zone abbreviation) the decoder raises ValueError naming the setting. A decoder
        registered for one of these types wins over these. For "ISO, ..." and "postgres"
        these are the registry's own decoders. ValueError for an unknown style.
        """
        found: dict[int, Decoder] = {
            oid: self._text[oid] if oid in self._custom_text else decoder
            for oid, decoder in styles.decoders_for_styles(datestyle, intervalstyle).items()
        }
        ranged: list[tuple[int, int, Callable[..., Any]]] = [
            (oid, sub, ranges.parse_range_text) for oid, sub in self._ranges.items()]
        ranged += [(oid, self._ranges.get(range_oid, 0), ranges.parse_multirange_text)
                   for oid, range_oid in self._multiranges.items()]
        for oid, sub, parse in ranged:  # daterange, tsrange, tstzrange, user ranges
            if sub not in found:
                continue
            if found[sub] is self._text.get(sub):
                found[oid] = self._text.get(oid, _decode_str)  # registered or the same
            else:
                found[oid] = ranges.make_range_decoder(found, sub, _decode_str, parse)
        for array_oid in self._styled_arrays(found):
            element = self._arrays.get(array_oid)
            if element is None or found[element[0]] is self._text.get(element[0]):
                found[array_oid] = self._text.get(array_oid, _decode_str)  # registered or same
            else:
                found[array_oid] = arrays.make_text_array_decoder(
                    found, element[0], element[1].encode(), _decode_str)
        return found

    # -- encoding --------------------------------------------------------------------------

    def encode(self, value: Any) -> tuple[int, int, bytes | None]:
        """(type oid, format, data) of one parameter; None -> (0, 0, None)."""
        encoder = self._params.get(type(value)) or self._param_encoder(type(value))
        return encoder(value)

    def encode_params(
        self, values: Sequence[Any]
    ) -> tuple[tuple[int, ...], tuple[int, ...], list[bytes | None]]:
        """(oids, formats, data) of a parameter list, for Parse and Bind."""
        try:
            return self._encode_params(values)
        except UnicodeEncodeError as exc:  # a str with lone surrogates: never valid text
            raise InterfaceError(f"a parameter is not valid Unicode text "
                                 f"({exc.reason} at position {exc.start})") from None

    def _encode_params(
        self, values: Sequence[Any]
    ) -> tuple[tuple[int, ...], tuple[int, ...], list[bytes | None]]:
        get = self._params.get
        if len(values) == 1:  # the most common shape, without the list juggling
            value = values[0]
            oid, fmt, payload = (get(type(value)) or self._param_encoder(type(value)))(value)
            return (oid,), (fmt,), [payload]
        type_oids = []
        formats = []
        data = []
        for value in values:
            encoder = get(type(value)) or self._param_encoder(type(value))
            oid, fmt, payload = encoder(value)
            type_oids.append(oid)
            formats.append(fmt)
            data.append(payload)
        return tuple(type_oids), tuple(formats), data

    def encode_text(self, value: Any) -> str | None:
        """The input text of a value (arrays and COPY use it); None for None."""
        if value is None:
            return None
        return self._dumper(type(value))(value)[1]

    # -- extension -------------------------------------------------------------------------

    def register(
        self,
        oid: int,
        *,
        text_decoder: Decoder | None = None,
        binary_decoder: Decoder | None = None,
        python_type: type | None = None,
        encoder: Callable[[Any], str] | None = None,
        array_oid: int | None = None,
        delimiter: str = ",",
    ) -> None:
        """Add or replace the codecs of type ``oid``.

        ``text_decoder`` / ``binary_decoder`` take the column bytes (or a memoryview)
        and return a value. A binary decoder makes results of the type come in binary;
        a text decoder given alone drops the built-in binary one, so the result is
        always yours. ``encoder`` turns instances of ``python_type`` (and subclasses)
        into input text, sent with type ``oid``. ``array_oid`` (the type's ``typarray``)
        makes its arrays decode and lists of it encode.
        """
        self.version += 1
        if text_decoder is not None:
            self._text[oid] = text_decoder
            self._custom_text.add(oid)
            for derived in (self._arrays, self._ranges, self._multiranges, self._domains,
                            self._composites):
                derived.pop(oid, None)  # a custom decoder for a derived type wins
            if binary_decoder is None:
                self._binary.pop(oid, None)
                self._formats.pop(oid, None)
        if binary_decoder is not None:
            self._binary[oid] = binary_decoder
            self._formats[oid] = 1
        if (python_type is None) != (encoder is None):
            raise InterfaceError("register(): give python_type and encoder together")
        if python_type is not None and encoder is not None:
            self._register_encoder(python_type, oid, encoder)
        if array_oid is not None:
            self.register_array(array_oid, oid, delimiter)
        self._refresh_derived()

    def register_param(self, cls: type, encoder: ParamEncoder) -> None:
        """Send instances of ``cls`` (and its subclasses) as ``encoder(value)`` gives them:
        ``(type oid, format, data)``, the parameter's type chosen per value."""
        self.version += 1
        self._class_params[cls] = encoder
        self._reset_encoder_caches()

    def register_array(self, array_oid: int, element_oid: int, delimiter: str = ",") -> None:
        """Decode type ``array_oid`` as an array of ``element_oid`` and encode lists with it."""
        self.version += 1
        self._arrays[array_oid] = (element_oid, delimiter)
        self._array_of[element_oid] = array_oid
        self._delimiters[element_oid] = delimiter
        self._refresh_derived()

    def copy(self) -> TypeRegistry:
        """An independent registry with the same codecs (and the same version number)."""
        new = TypeRegistry.__new__(TypeRegistry)
        new.version = self.version
        new._text = dict(self._text)
        new._custom_text = set(self._custom_text)
        new._binary = dict(self._binary)
        new._formats = dict(self._formats)
        new._arrays = dict(self._arrays)
        new._learned = set(self._learned)
        new._vanished = set(self._vanished)
        new.unseen = set()
        new.outside = None
        new._array_of = dict(self._array_of)
        new._delimiters = dict(self._delimiters)
        new._ranges = dict(self._ranges)
        new._multiranges = dict(self._multiranges)
        new._domains = dict(self._domains)
        new._composites = dict(self._composites)
        new._factories = dict(self._factories)
        new._composite_classes = set(self._composite_classes)
        new._class_dumpers = dict(self._class_dumpers)
        new._class_params = dict(self._class_params)
        new._reset_encoder_caches()
        new._refresh_derived()
        return new

    # -- internals -------------------------------------------------------------------------

    def _styled_arrays(self, styled: dict[int, Decoder]) -> list[int]:
        """Array types of the styled types (and of ranges over them): the built-in ones
        and those registered or learned."""
        registered = [array_oid for array_oid, (element, _) in self._arrays.items()
                      if element in styled]
        return list(dict.fromkeys([*styles.STYLED_ARRAY_OIDS, *registered]))

    def _register_encoder(self, cls: type, oid: int, encoder: Callable[[Any], str]) -> None:
        def dump(value: Any) -> tuple[int, str]:
            return oid, encoder(value)

        self._class_dumpers[cls] = dump
        self._class_params[cls] = text.checked_param_from_dumper(dump)
        self._reset_encoder_caches()

    def _reset_encoder_caches(self) -> None:
        """Explicit tables (classes registered, plus list) and the caches that grow from them."""
        built: dict[type, Dumper] = {Range: self._dump_range,
                                     Multirange: self._dump_multirange}
        built.update(dict.fromkeys(self._composite_classes, self._dump_record))
        self._explicit_dumpers = {**built, **self._class_dumpers, list: self._dump_list}
        self._explicit_params = {
            **{cls: text.checked_param_from_dumper(dump) for cls, dump in built.items()},
            **self._class_params, list: self._param_list}
        self._dumpers: dict[type, Dumper] = dict(self._explicit_dumpers)
        self._params: dict[type, ParamEncoder] = dict(self._explicit_params)

    def _refresh_derived(self) -> None:
        """(Re)install the decoders of the derived types over this registry's tables, parts
        before what is built on them: binary (and its result format) only where every part
        reads binary; an array's, range's or multirange's result format is its part's."""
        parts = self._derived_types()
        for oid in parts:
            self._binary.pop(oid, None)
            self._formats.pop(oid, None)
        done: set[int] = set()
        for oid in parts:
            self._install_derived(oid, parts, done)
        for oid in [oid for oid, fmt in self._formats.items() if fmt == 0]:
            del self._formats[oid]

    def _derived_types(self) -> dict[int, tuple[int, ...]]:
        """Every derived type and the types it is made of."""
        parts: dict[int, tuple[int, ...]] = {}
        parts.update((oid, (sub,)) for oid, sub in self._ranges.items())
        parts.update((oid, (rng,)) for oid, rng in self._multiranges.items())
        parts.update((oid, fields) for oid, (_, fields) in self._composites.items())
        parts.update((oid, (base,)) for oid, base in self._domains.items())
        parts.update((oid, (element,)) for oid, (element, _) in self._arrays.items())
        return parts

    def _install_derived(self, oid: int, parts: dict[int, tuple[int, ...]],
                         done: set[int]) -> None:
        if oid in done:
            return
        done.add(oid)  # before its parts: a cycle (PostgreSQL forbids them) ends here
        for part in parts[oid]:
            if part in parts:
                self._install_derived(part, parts, done)
        text_decoder, binary_decoder, fmt = self._derived_codecs(oid, parts[oid])
        self._text[oid] = text_decoder
        if binary_decoder is not None and all(part in self._binary for part in parts[oid]):
            self._binary[oid] = binary_decoder
            self._formats[oid] = fmt

    def _derived_codecs(self, oid: int,
                        made_of: tuple[int, ...]) -> tuple[Decoder, Decoder | None, int]:
        """(text decoder, binary decoder, result format) of a derived type."""
        text_table, binary_table = self._text, self._binary
        if oid in self._arrays:
            element, delim = self._arrays[oid]
            return (arrays.make_text_array_decoder(text_table, element, delim.encode(),
                                                   _decode_str),
                    arrays.make_binary_array_decoder(binary_table),
                    self._formats.get(element, 0))
        if oid in self._domains:
            base = made_of[0]
            return (text_table.get(base, _decode_str), binary_table.get(base),
                    self._formats.get(base, 0))
        if oid in self._composites:
            name, fields = self._composites[oid]
            factory = self._factories.get(oid) or self._factories.get(name) or composites.as_tuple
            return (composites.make_text_record_decoder(text_table, fields, _decode_str, factory),
                    composites.make_binary_record_decoder(binary_table, factory), 1)
        parse_text: Callable[..., Any]
        parse_binary: Callable[..., Any]
        if oid in self._ranges:
            sub, parse_text, parse_binary = (made_of[0], ranges.parse_range_text,
                                             ranges.parse_range_binary)
        else:  # a multirange: its bounds are of its range's subtype
            sub, parse_text, parse_binary = (self._ranges.get(made_of[0], 0),
                                             ranges.parse_multirange_text,
                                             ranges.parse_multirange_binary)
        return (ranges.make_range_decoder(text_table, sub, _decode_str, parse_text),
                ranges.make_range_decoder(binary_table, sub, bytes, parse_binary),
                self._formats.get(made_of[0], 0))

    @staticmethod
    def _lookup(cls: type, cache: dict[type, Any], explicit: dict[type, Any]) -> Any:
        """The codec of the nearest registered base class, cached under ``cls``."""
        for base in cls.__mro__:
            found = explicit.get(base)
            if found is not None:
                cache[cls] = found
                return found
        hint = _UNENCODABLE_HINTS.get(cls, "")
        raise InterfaceError(f"cannot send a value of Python type {cls.__qualname__}{hint}")

    def _param_encoder(self, cls: type) -> ParamEncoder:
        return self._params.get(cls) or self._lookup(cls, self._params, self._explicit_params)

    def _dumper(self, cls: type) -> Dumper:
        return self._dumpers.get(cls) or self._lookup(cls, self._dumpers, self._explicit_dumpers)

    def _dump_list(self, value: list[Any]) -> tuple[int, str]:
        element_oid, array_text = arrays.dump_array(value, self._dumper, self._delimiter_of)
        return self._array_of.get(element_oid, 0), array_text

    def _dump_range(self, value: Range) -> tuple[int, str]:
        return ranges.dump_range(value, self._dumper)

    def _dump_multirange(self, value: Multirange) -> tuple[int, str]:
        return ranges.dump_multirange(value, self._dumper)

    def _dump_record(self, value: Any) -> tuple[int, str]:
        return composites.dump_record(value, self._dumper)

    def _param_list(self, value: list[Any]) -> tuple[int, int, bytes]:
        array_oid, array_text = self._dump_list(value)
        return array_oid, 0, arrays.check_no_nul(array_text).encode()

    def _delimiter_of(self, element_oid: int) -> str:
        return self._delimiters.get(element_oid, ",")


default_registry = TypeRegistry()


# The compiled twin of encode_params (pgmux._native), which hands everything unusual to
# the reference above.
python_encode_params = TypeRegistry.encode_params  # (registry, values)
_compiled = native_extension("pgmux.types._cparams")
if _compiled is not None:
    _compiled.configure(reference=python_encode_params,
                        int_encoder=text.param_int, str_encoder=text.param_str,
                        null_encoder=SPECIAL_PARAMS[type(None)])
    TypeRegistry.encode_params = _compiled.ENCODE_PARAMS  # type: ignore[method-assign]
