"""Independent judge of structured outputs: python3-jsonschema (the schema's own draft, Draft 2020-12 when it
names none) with a FormatChecker whose date, time, date-time, uuid, email, ipv4, hostname and uri checks are
strict ones written here from their RFCs (RFC 3339, RFC 4122, RFC 5321's dot-atom, RFC 1123, RFC 3986's
scheme), since jsonschema skips some formats without optional packages.  Nothing here comes from cinfer."""
import datetime
import ipaddress
import re

import jsonschema

_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$", re.ASCII)
_TIME = re.compile(r"^(\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))$", re.ASCII)
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", re.ASCII)
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_EMAIL = re.compile(rf"^{_ATOM}(\.{_ATOM})*@{_LABEL}(\.{_LABEL})*$", re.ASCII)
_HOST = re.compile(rf"^{_LABEL}(\.{_LABEL})*$", re.ASCII)
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:[^\s]*$", re.ASCII)


def is_date(s):
    m = _DATE.match(s)
    if not m:
        return False
    try:
        datetime.date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        return False
    return True


def is_time(s):
    m = _TIME.match(s)
    if not m:
        return False
    h, mi, sec = int(m[1]), int(m[2]), int(m[3])
    if h > 23 or mi > 59 or sec > 60:
        return False
    if m[6] is not None and (int(m[6]) > 23 or int(m[7]) > 59):
        return False
    return True


def is_date_time(s):
    parts = re.split("[Tt]", s)
    return len(parts) == 2 and is_date(parts[0]) and is_time(parts[1])


def is_ipv4(s):
    try:
        ipaddress.IPv4Address(s)
    except ValueError:
        return False
    return True


STRICT = {
    "date": is_date,
    "time": is_time,
    "date-time": is_date_time,
    "uuid": lambda s: bool(_UUID.match(s)),
    "email": lambda s: bool(_EMAIL.match(s)) and len(s) <= 254,
    "ipv4": is_ipv4,
    "hostname": lambda s: bool(_HOST.match(s)) and len(s) <= 253,
    "uri": lambda s: bool(_URI.match(s)),
}


def format_checker():
    fc = jsonschema.FormatChecker()
    for name, fn in STRICT.items():
        fc.checkers.pop(name, None)
        fc.checks(name)(lambda inst, fn=fn: not isinstance(inst, str) or fn(inst))
    return fc


_FC = format_checker()


def validator(schema):
    """A validator for schema in its declared draft (Draft 2020-12 by default), formats checked strictly."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=_FC)


def errors(schema, instance):
    """'' when instance is valid, else the first error's message."""
    for e in validator(schema).iter_errors(instance):
        return e.message[:300]
    return ""
