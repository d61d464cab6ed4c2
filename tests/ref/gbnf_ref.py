"""An independent GBNF recognizer for the tests: a small parser of llama.cpp's grammar format (written from
its README, not from cinfer's code) and an Earley recognizer over Unicode code points.

    g = parse(text)                  # {"root": [[sym, ...], ...], ...}
    recognize(g, s) -> "full" | "prefix" | "no"

A symbol is ("ref", name) or ("cls", negated, [(lo, hi), ...]).  Repetitions become extra rules here the
plain way (x* -> r ::= x r | "", x{m,n} -> m copies then nested optionals).  Standard library only."""


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


if __name__ == "__main__":  # self-check
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
