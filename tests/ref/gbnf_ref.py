"""An independent GBNF recognizer for the tests: a small parser of llama.cpp's grammar format (written from
its README, not from cinfer's code) and an Earley recognizer over Unicode code points.

    g = parse(text)                  # {"root": [[sym, ...], ...], ...}
    recognize(g, s) -> "full" | "prefix" | "no"
    derive(g, rng, max_len) -> a random sentence of g (rng: random.Random)

    python3 gbnf_ref.py derive FILE N SEED   prints N random sentences of the grammar in FILE, one per line as
                                             hex of their UTF-8 bytes (for the C tests)

A symbol is ("ref", name) or ("cls", negated, [(lo, hi), ...]).  Repetitions become extra rules here the
plain way (x* -> r ::= x r | "", x{m,n} -> m copies then nested optionals).  Standard library only."""


import sys


class GrammarError(Exception):
    pass


def parse(text):
    rules = {}
    pos = 0
    n = len(text)
    counter = [0]

    def new_rule(base):
        counter[0] += 1
        return f"{base}~{counter[0]}"

    def space(newline_ok):
        nonlocal pos
        while pos < n:
            c = text[pos]
            if c in " \t" or (newline_ok and c in "\r\n"):
                pos += 1
            elif c == "#":
                while pos < n and text[pos] not in "\r\n":
                    pos += 1
            else:
                break

    def is_word(c):
        return c.isascii() and (c.isalnum() or c == "-")

    def char():
        nonlocal pos
        if pos >= n:
            raise GrammarError("unexpected end")
        c = text[pos]
        if c != "\\":
            pos += 1
            return ord(c)
        e = text[pos + 1]
        pos += 2
        simple = {"n": 10, "r": 13, "t": 9, "\\": 92, '"': 34, "[": 91, "]": 93, "-": 45}
        if e in simple:
            return simple[e]
        width = {"x": 2, "u": 4, "U": 8}[e]
        v = int(text[pos:pos + width], 16)
        pos += width
        return v

    def sequence(name, nested):
        nonlocal pos
        seq = []
        last = None  # index in seq of the last item
        while pos < n:
            c = text[pos]
            if c == '"':
                pos += 1
                start = len(seq)
                while text[pos] != '"':
                    cp = char()
                    seq.append(("cls", False, [(cp, cp)]))
                pos += 1
                # a literal repeats as a whole: keep it as one item via a helper rule
                lit = seq[start:]
                del seq[start:]
                if len(lit) == 1:
                    seq.append(lit[0])
                else:
                    r = new_rule(name)
                    rules[r] = [lit]
                    seq.append(("ref", r))
                last = len(seq) - 1
            elif c == "[":
                pos += 1
                neg = False
                if text[pos] == "^":
                    neg = True
                    pos += 1
                ranges = []
                while text[pos] != "]":
                    lo = char()
                    hi = lo
                    if text[pos] == "-" and text[pos + 1] != "]":
                        pos += 1
                        hi = char()
                    ranges.append((lo, hi))
                pos += 1
                seq.append(("cls", neg, ranges))
                last = len(seq) - 1
            elif is_word(c):
                s = pos
                while pos < n and is_word(text[pos]):
                    pos += 1
                seq.append(("ref", text[s:pos]))
                last = len(seq) - 1
            elif c == "(":
                pos += 1
                space(True)
                r = new_rule(name)
                rules[r] = alternates(name, True)
                if text[pos] != ")":
                    raise GrammarError("expected )")
                pos += 1
                seq.append(("ref", r))
                last = len(seq) - 1
            elif c == ".":
                pos += 1
                seq.append(("cls", True, []))
                last = len(seq) - 1
            elif c in "*+?{":
                pos += 1
                if c == "*":
                    lo, hi = 0, None
                elif c == "+":
                    lo, hi = 1, None
                elif c == "?":
                    lo, hi = 0, 1
                else:
                    close = text.index("}", pos)
                    body = text[pos:close].replace(" ", "")
                    pos = close + 1
                    if "," in body:
                        a, b = body.split(",")
                        lo, hi = int(a), (int(b) if b else None)
                    else:
                        lo = hi = int(body)
                item = seq.pop(last)
                out = [item] * lo
                if hi is None:
                    r = new_rule(name)
                    rules[r] = [[item, ("ref", r)], []]
                    out.append(("ref", r))
                elif hi > lo:
                    prev = None
                    for _ in range(hi - lo):
                        r = new_rule(name)
                        rules[r] = [[item] + ([("ref", prev)] if prev else []), []]
                        prev = r
                    out.append(("ref", prev))
                seq.extend(out)
                last = None
            else:
                break
            space(nested)
        return seq

    def alternates(name, nested):
        nonlocal pos
        alts = [sequence(name, nested)]
        while pos < n and text[pos] == "|":
            pos += 1
            space(True)
            alts.append(sequence(name, nested))
        return alts

    space(True)
    while pos < n:
        s = pos
        while pos < n and is_word(text[pos]):
            pos += 1
        name = text[s:pos]
        if not name:
            raise GrammarError(f"expected a rule name at {pos}")
        space(False)
        if text[pos:pos + 3] != "::=":
            raise GrammarError("expected ::=")
        pos += 3
        space(True)
        rules[name] = alternates(name, False)
        space(True)
    for alts in rules.values():
        for alt in alts:
            for sym in alt:
                if sym[0] == "ref" and sym[1] not in rules:
                    raise GrammarError(f"undefined rule {sym[1]}")
    if "root" not in rules:
        raise GrammarError("no root")
    return rules


def _matches(sym, cp):
    _, neg, ranges = sym
    inside = any(lo <= cp <= hi for lo, hi in ranges)
    return inside != neg


def _nullable(g):
    null = set()
    changed = True
    while changed:
        changed = False
        for name, alts in g.items():
            if name in null:
                continue
            if any(all(s[0] == "ref" and s[1] in null for s in alt) for alt in alts):
                null.add(name)
                changed = True
    return null


def recognize(g, s, start="root"):
    """'full' when s is a sentence of g, 'prefix' when it can be extended to one, else 'no'."""
    null = _nullable(g)
    cps = [ord(c) for c in s]
    # An item: (rule, alt index, dot, origin)
    chart = [set() for _ in range(len(cps) + 1)]

    def add(i, item, agenda):
        if item not in chart[i]:
            chart[i].add(item)
            agenda.append(item)

    agenda = []
    for a in range(len(g[start])):
        add(0, (start, a, 0, 0), agenda)
    for i in range(len(cps) + 1):
        agenda = list(chart[i])
        while agenda:
            r, a, d, o = agenda.pop()
            alt = g[r][a]
            if d == len(alt):  # complete
                for (r2, a2, d2, o2) in list(chart[o]):
                    alt2 = g[r2][a2]
                    if d2 < len(alt2) and alt2[d2] == ("ref", r):
                        add(i, (r2, a2, d2 + 1, o2), agenda)
                continue
            sym = alt[d]
            if sym[0] == "ref":
                for a2 in range(len(g[sym[1]])):
                    add(i, (sym[1], a2, 0, i), agenda)
                if sym[1] in null:
                    add(i, (r, a, d + 1, o), agenda)
            elif i < len(cps) and _matches(sym, cps[i]):
                chart[i + 1].add((r, a, d + 1, o))
        if i < len(cps) and not chart[i + 1]:
            return "no"
    if any(r == start and d == len(g[r][a]) and o == 0 for (r, a, d, o) in chart[len(cps)]):
        return "full"
    return "prefix"


# Code points a negated class or '.' draws from (then filtered by the class): ASCII, Latin-1, Greek, CJK, emoji,
# and the edges of the UTF-8 length classes.  No NUL and no surrogates (not encodable as UTF-8).
_POOL = ([c for c in range(0x20, 0x7F)] * 4 + [9, 10, 13, 0x1F, 0x7F, 0x80, 0xA0, 0xE9, 0xFF, 0x100, 0x3B1, 0x7FF,
         0x800, 0x4E2D, 0x65E5, 0xFFFD, 0xFFFF, 0x10000, 0x1F600, 0x1F44D, 0x10FFFF])


def _heights(g):
    """The least derivation depth of each rule (every rule of a valid grammar derives some string)."""
    h = {}
    changed = True
    while changed:
        changed = False
        for name, alts in g.items():
            best = None
            for alt in alts:
                d = 0
                for s in alt:
                    if s[0] == "ref":
                        if s[1] not in h:
                            d = None
                            break
                        d = max(d, h[s[1]])
                if d is not None and (best is None or d + 1 < best):
                    best = d + 1
            if best is not None and h.get(name) != best:
                h[name] = best
                changed = True
    return h


def _pick_cp(sym, rng):
    _, neg, ranges = sym
    if not neg:
        lo, hi = rng.choice(ranges)
        while True:
            cp = rng.randint(lo, hi)
            if not (0xD800 <= cp <= 0xDFFF) and cp != 0:
                return cp
    for _ in range(1000):
        cp = rng.choice(_POOL)
        if _matches(sym, cp):
            return cp
    raise GrammarError("no code point found for a negated class")


def derive(g, rng, max_len=60, start="root"):
    """A random sentence of g: alternatives drawn uniformly while the text is short and the derivation shallow,
    then the shortest-terminating ones."""
    h = _heights(g)
    out = []

    def alt_height(alt):
        return max([h[s[1]] for s in alt if s[0] == "ref"], default=0)

    def expand(name, depth):
        alts = g[name]
        if len(out) >= max_len or depth > 40:
            m = min(alt_height(a) for a in alts)
            choices = [a for a in alts if alt_height(a) == m]
        else:
            choices = alts
        for s in rng.choice(choices):
            if s[0] == "ref":
                expand(s[1], depth + 1)
            else:
                out.append(chr(_pick_cp(s, rng)))

    expand(start, 0)
    return "".join(out)


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "derive":
    import random
    with open(sys.argv[2], encoding="utf-8") as f:
        g = parse(f.read())
    rng = random.Random(int(sys.argv[4]))
    for _ in range(int(sys.argv[3])):
        s = derive(g, rng)
        assert recognize(g, s) == "full", s
        print(s.encode("utf-8").hex())
elif __name__ == "__main__":  # self-check
    g = parse('root ::= "a"{2,3} b* | "x" ( "y" | "z" )+\nb ::= [^a-c]\n')
    assert recognize(g, "aa") == "full"
    assert recognize(g, "aaa") == "full"
    assert recognize(g, "aaad") == "full"
    assert recognize(g, "aaaa") == "no"
    assert recognize(g, "a") == "prefix"
    assert recognize(g, "xyzy") == "full"
    assert recognize(g, "xa") == "no"
    assert recognize(g, "x") == "prefix"
    print("ok")
