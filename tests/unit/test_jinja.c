/* chat/jinja: the Jinja engine's pieces, each expected output derived by hand from Jinja's semantics as
 * @huggingface/jinja implements them (the reference tests/chat/templates_check.py compares real templates
 * against): expressions and operators, literals and escapes, slicing, filters, tests, string and dict methods,
 * statements (for with loop.*, else, conditions, break/continue; set, block set, namespace; macro, call,
 * filter blocks), whitespace control with trim_blocks and lstrip_blocks, errors with their template line, and
 * the bounds that stop a hostile template. */
#include "chat/jinja.h" // first: the header must compile on its own

#include <cjson/cJSON.h>
#include <string.h>

#include "core/mem.h"
#include "test.h"

/* Renders tmpl with the JSON context (NULL: none); returns the text (ci_free it) or NULL with err set. */
static char *render_lim(const char *tmpl, const char *ctx, const struct jinja_limits *lim,
                        struct ci_err *err) {
    struct jinja_template *t = NULL;
    if (jinja_template_parse(tmpl, strlen(tmpl), &t, err) != CI_OK)
        return NULL;
    cJSON *c = ctx ? cJSON_Parse(ctx) : NULL;
    char *out = NULL;
    size_t len = 0;
    if (jinja_render(t, c, lim, &out, &len, err) == CI_OK && strlen(out) != len) {
        ci_free(out);
        out = NULL;
        ci_err_set(err, CI_ERR_INTERNAL, "length mismatch");
    }
    cJSON_Delete(c);
    jinja_template_free(t);
    return out;
}

static char *render(const char *tmpl, const char *ctx, struct ci_err *err) {
    return render_lim(tmpl, ctx, NULL, err);
}

struct jcase {
    const char *tmpl, *ctx, *want;
};

static void run_cases(const struct jcase *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        struct ci_err err = {0};
        char *got = render(cases[i].tmpl, cases[i].ctx, &err);
        if (!got)
            TEST_FAILF("case %zu %s: error %s", i, cases[i].tmpl, err.msg);
        else if (strcmp(got, cases[i].want) != 0)
            TEST_FAILF("case %zu %s: got '%s', want '%s'", i, cases[i].tmpl, got, cases[i].want);
        ci_free(got);
    }
}
#define RUN_CASES(c) run_cases(c, sizeof c / sizeof c[0])

TEST(expressions) {
    static const struct jcase cases[] = {
        {"{{ 1 + 2 * 3 }}", NULL, "7"},
        {"{{ (1 + 2) * 3 }}", NULL, "9"},
        {"{{ 7 // 2 }},{{ -7 // 2 }},{{ 7 % 3 }},{{ 2 ** 10 }},{{ 7 / 2 }}", NULL, "3,-4,1,1024,3.5"},
        {"{{ 1.0 }},{{ 0.5 + 0.25 }},{{ 2 * 1.5 }},{{ 0.1 + 0.2 }}", NULL,
         "1.0,0.75,3.0,0.30000000000000004"},
        {"{{ 'a' ~ 1 ~ 2.0 ~ true }}", NULL, "a12true"}, // ~ uses JavaScript's String(): 2.0 is "2"
        {"{{ 'x' + 1 }}{{ 'ab' + 'cd' }}", NULL, "x1abcd"},
        {"{{ 'ab' in 'cabd' }} {{ 3 not in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 2 in [1, 2] }}", NULL,
         "true true true true"},
        {"{{ 1 < 2 and 2 <= 2 and 3 > 2 and 3 >= 4 }}|{{ 1 == 1.0 }}|{{ 'a' != 'b' }}", NULL,
         "false|true|true"},
        {"{{ none }}{{ nothing }}{{ true }}{{ True }}{{ false }}", NULL, "truetruefalse"}, // none renders ""
        {"{{ 'y' if x else 'n' }}{{ 'y' if 1 > 0 else 'n' }}", NULL, "ny"},
        {"{{ not x }}{{ not not 1 }}{{ 0 or 'b' }}{{ 'a' and 'c' }}", NULL, "truetruebc"},
        {"{{ -x }}", "{\"x\": 3}", "-3"},
        {"{{ [1, 'a', none, true, 1.5] }}", NULL, "[1, \"a\", null, true, 1.5]"},
        {"{{ {'a': 1, 'b': [2, {'c': 'd'}]} }}", NULL, "{\"a\": 1, \"b\": [2, {\"c\": \"d\"}]}"},
        {"{{ (1, 2) }}", NULL, "[1, 2]"},
        {"{{ 'a\\tb\\n\\'q\\' \\\"d\\\" \\\\ \\x41\\u00e9' }}", NULL, "a\tb\n'q' \"d\" \\ A\xc3\xa9"},
        {"{{ 'con' 'cat' }}", NULL, "concat"},
        {"{{ m.role }}{{ m['role'] }}{{ m.list[1] }}{{ m.list[-1] }}{{ m.list.0 }}{{ m.missing is defined }}",
         "{\"m\": {\"role\": \"user\", \"list\": [10, 20]}}", "useruser202010false"},
        {"{{ m.a.b.c is defined }}{{ m.missing == none }}", "{\"m\": {}}", "falsetrue"},
        {"{{ 'hello'[1:3] }}|{{ 'hello'[::-1] }}|{{ [1, 2, 3, 4][-2:] }}|{{ [1, 2, 3, 4][::2] }}|{{ "
         "'abc'[-1] }}",
         NULL, "el|olleh|[3, 4]|[1, 3]|c"},
        {"{{ [1, 2, 3][5:] }}|{{ 'h\xc3\xa9llo'[1:2] }}", NULL, "[]|\xc3\xa9"}, // code points
        {"{{ messages[0]['content'] }}", "{\"messages\": [{\"content\": \"hi\"}]}", "hi"},
        {"{{ 1.5 }}|{{ 100 }}|{{ 3.0 }}", "{}", "1.5|100|3.0"},
        {"{{ n }}|{{ f }}", "{\"n\": 2.0, \"f\": 2.5}", "2|2.5"}, // JSON 2.0 is an integer, as in JavaScript
    };
    RUN_CASES(cases);
}

TEST(filters) {
    static const struct jcase cases[] = {
        {"{{ ' x \\n'|trim }}|{{ 'abc'|upper }}|{{ 'ABC'|lower }}|{{ 'hello big world'|title }}|"
         "{{ 'hello World'|capitalize }}",
         NULL,
         "x|ABC|abc|Hello Big World|Hello world"}, // capitalize: jinja2's, as llama.cpp (the JS one keeps "W")
        // jinja2's tests with an argument, select/reject, string repetition (llama.cpp's test-jinja cases)
        {"{{ 'y' if 6 is divisibleby(3) }}{{ 'n' if 7 is divisibleby(3) }}|{{ 'y' if 3 is eq(3) }}|"
         "{{ 'y' if 4 is not equalto(3) }}|{{ 'y' if 3 is ge(3) and 2 is lt(3) and 'b' is gt('a') }}|"
         "{{ 'y' if 2 is in([1, 2]) }}{{ 'n' if 'z' is in('abc') }}|{{ 'y' if false is sameas(false) }}",
         NULL, "y|y|y|y|y|y"},
        {"{{ [1, 2, 3, 4]|select('odd')|join(',') }}|{{ [1, 2, 3, 4]|reject('odd')|join(',') }}|"
         "{{ ['a', 'b', 'c']|select('in', ['b', 'c', 'x'])|join }}|{{ [0, 1, '', 'x']|select|list|length }}|"
         "{{ 'ab' * 3 }}{{ 2 * '-' }}{{ 'z' * 0 }}",
         NULL, "1,3|2,4|bc|2|ababab--"},
        {"{{ [3, 1, 2]|sort|join(',') }}|{{ ['b', 'A', 'c']|sort|join }}|{{ [3, 1, "
         "2]|sort(reverse=true)|join }}",
         NULL, "1,2,3|Abc|321"},
        {"{{ [1, 2, 3]|length }}{{ 'abc'|length }}{{ {'a': 1}|length }}{{ [1, 2]|count }}", NULL, "3312"},
        {"{{ [1, 2, 3]|first }}{{ [1, 2, 3]|last }}{{ [1, 2, 3]|reverse|list }}", NULL, "13[3, 2, 1]"},
        {"{{ x|default('d') }}{{ ''|default('e', true) }}{{ 'v'|default('f') }}{{ none|default('g') }}", NULL,
         "dev"}, // none is defined: default keeps it (and it renders "")
        {"{{ {'a': [1, '\xc3\xa9'], 'b': none}|tojson }}", NULL, "{\"a\": [1, \"\xc3\xa9\"], \"b\": null}"},
        {"{{ {'a': 1, 'b': [1, 2], 'c': {}}|tojson(indent=2) }}", NULL,
         "{\n  \"a\": 1,\n  \"b\": [\n    1,\n    2\n  ],\n  \"c\": {}\n}"},
        {"{{ '\xc3\xa9\xf0\x9f\x98\x80\"\\n'|tojson(ensure_ascii=true) }}", NULL,
         "\"\\u00e9\\ud83d\\ude00\\\"\\n\""},
        {"{{ {'b': 1, 'a': 2}|tojson(separators=(',', ':'), sort_keys=true) }}", NULL, "{\"a\":2,\"b\":1}"},
        {"{{ 2.0|tojson }}|{{ x|tojson }}", NULL, "2|null"},
        {"{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(',') }}|"
         "{{ msgs|rejectattr('role', 'equalto', 'user')|map(attribute='content')|first }}|"
         "{{ msgs|selectattr('tool')|list|length }}",
         "{\"msgs\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"U\"}, "
         "{\"role\": \"user\", \"content\": \"V\", \"tool\": 1}]}",
         "U,V|S|1"},
        {"{{ msgs|map(attribute='x', default='-')|join }}", "{\"msgs\": [{\"x\": \"a\"}, {}]}", "a-"},
        {"{% for k, v in {'a': 1, 'b': 2}|items %}{{ k }}={{ v }};{% endfor %}", NULL, "a=1;b=2;"},
        {"{{ 'aaa'|replace('a', 'b') }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'ab'|replace('', '-') }}", NULL,
         "bbb|bba|-a-b-"},
        {"{{ '42'|int + 1 }}|{{ '2.5'|float }}|{{ 3|string ~ 'x' }}|{{ 'x'|int }}|{{ 3.7|int }}|{{ true|int "
         "}}",
         NULL, "43|2.5|3x|0|3|1"},
        {"{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\nb'|indent }}", NULL,
         "a\n  b\n\n  c|  a\n  b|a\n    b"},
        {"{{ [1, 2, 1, 'a', 'a']|unique|list }}", NULL, "[1, 2, \"a\"]"},
        {"{% for k, v in {'b': 1, 'A': 2}|dictsort %}{{ k }}{% endfor %}", NULL, "Ab"},
        {"{{ -3|abs }}{{ (0 - 2.5)|abs }}", NULL, "32.5"},
        {"{{ 'x'|safe }}{{ [1, 2]|string }}{{ ['a', 'b']|join('-') }}{{ 'abc'|join('.') }}", NULL,
         "x[1, 2]a-ba.b.c"},
        {"{% filter upper %}abc{{ 'd' }}{% endfilter %}", NULL, "ABCD"},
    };
    RUN_CASES(cases);
}

TEST(tests_and_methods) {
    static const struct jcase cases[] = {
        {"{{ 1 is number }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ none is none }}"
         "{{ x is undefined }}{{ 3 is odd }}{{ 4 is even }}{{ 2 is integer }}{{ true is boolean }}"
         "{{ 'a' is not number }}{{ x is not defined }}{{ 'ab' is lower }}{{ true is true }}",
         NULL, "truetruetruetruetruetruetruetruetruetruetruetruetruetrue"},
        {"{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a,b,c'.split(',', 1) }}", NULL,
         "[\"a\", \"b\", \"\", \"c\"]|[\"a\", \"b\"]|[\"a\", \"b,c\"]"},
        {"{{ '  x  '.strip() }}|{{ '  x'.lstrip() }}|{{ 'x  '.rstrip() }}|{{ 'ab'.upper() }}|{{ 'AB'.lower() "
         "}}",
         NULL, "x|x|x|AB|ab"},
        {"{{ 'hello'.startswith('he') }}{{ 'hello'.endswith(('x', 'lo')) }}{{ 'hello'.startswith('lo') }}",
         NULL, "truetruefalse"},
        {"{{ 'a-b-c'.replace('-', '+') }}|{{ 'hello'.find('l') }}|{{ 'hello'.count('l') }}|{{ 'hello'.length "
         "}}",
         NULL, "a+b+c|2|2|5"},
        {"{{ m.get('role') }}{{ m.get('nope', 'dflt') }}{{ m.get('nope') is none }}{{ m.keys()|list }}"
         "{{ m.values()|list }}{{ m.items()|list }}",
         "{\"m\": {\"role\": \"user\"}}", "userdflttrue[\"role\"][\"user\"][[\"role\", \"user\"]]"},
        {"{{ range(3)|list }}{{ range(1, 4)|list }}{{ range(5, 0, -2)|list }}", NULL,
         "[0, 1, 2][1, 2, 3][5, 3, 1]"},
        {"{% set d = dict(a=1) %}{{ d.a }}{% set l = [] %}{{ l.append(2) }}{{ l }}", NULL, "1[2]"},
        // Python's str.format and list.pop (jinja2's; extensions)
        {"{{ '<{}|{}>'.format('a', 2) }}{{ '{1}{0}{{x}}'.format('a', 'b') }}{{ '{n}'.format(n=true) }}", NULL,
         "<a|2>ba{x}True"},
        {"{% set l = [1, 2, 3] %}{{ l.pop(0) }}{{ l.pop() }}{{ l }}", NULL, "13[2]"},
        // integer dict keys (jinja2's; an extension): sorted as numbers, compared as numbers, looked up
        {"{% set d = {512: 'b', 64: 'a', 'k': 'c'} %}{% for k, v in {512: 'b', 64: 'a'}|dictsort %}{{ k + 1 "
         "}}{{ v }}"
         "{% endfor %}{{ d[64] }}{{ d['k'] }}{{ d[65] is defined }}{{ d|tojson }}",
         NULL, "65a513bacfalse{\"512\": \"b\", \"64\": \"a\", \"k\": \"c\"}"},
    };
    RUN_CASES(cases);
}

TEST(statements) {
    static const struct jcase cases[] = {
        {"{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
         "{{ loop.length }}{{ loop.revindex }}{% if not loop.last %},{% endif %}{% endfor %}",
         NULL, "10truefalse33,21falsefalse32,32falsetrue31"},
        {"{% for x in [1, 2, 3] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }};{% endfor %}", NULL,
         "<1>2;1<2>3;2<3>;"},
        {"{% for x in [] %}x{% else %}empty{% endfor %}", NULL, "empty"},
        {"{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{% endfor %}|"
         "{% for x in [1, 2, 3, 4] if x > 1 %}{{ loop.length }}{% endfor %}",
         NULL, "24|333"},
        {"{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% "
         "endif %}"
         "{{ x }}{% endfor %}",
         NULL, "13"},
        {"{% for x in [1, 2] %}a{% if x == 2 %}{% break %}{% endif %}b{% endfor %}", NULL, "ab"},
        {"{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}", NULL, "xy"},
        {"{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}", NULL, "37"},
        {"{% set a = 1 %}{% set b, c = [2, 3] %}{{ a }}{{ b }}{{ c }}", NULL, "123"},
        {"{% set s %}x{{ 1 }}y{% endset %}[{{ s }}]", NULL, "[x1y]"},
        {"{% set ns = namespace(n=0, items=[]) %}{% for x in [1, 2, 3] %}{% set ns.n = ns.n + x %}{% endfor "
         "%}"
         "{{ ns.n }}",
         NULL, "6"},
        {"{% set n = 0 %}{% for x in [1, 2] %}{% set n = n + x %}{% endfor %}{{ n }}", NULL, "0"},
        {"{% if true %}{% set n = 5 %}{% endif %}{{ n }}", NULL, "5"},
        {"{% if x == 1 %}one{% elif x == 2 %}two{% elif x == 3 %}three{% else %}other{% endif %}",
         "{\"x\": 3}", "three"},
        {"{% macro f(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(1, b=2) }}{{ f(b=3, a=4) }}{{ "
         "f() }}",
         NULL, "[1B][12][43][B]"},
        {"{% macro wrap(t) %}<{{ t }}:{{ caller() }}>{% endmacro %}{% call wrap('p') %}in{% endcall %}", NULL,
         "<p:in>"},
        {"{% macro g() %}{{ varargs|length }}{{ kwargs.k }}{% endmacro %}{{ g(1, 2, k='v') }}", NULL, "2v"},
        {"{% macro outer() %}{{ v }}{% endmacro %}{% set v = 'seen' %}{{ outer() }}", NULL, "seen"},
    };
    RUN_CASES(cases);
}

/* Where @huggingface/jinja refuses an undefined value, cinfer follows jinja2's default Undefined (what
 * transformers renders with): it iterates as empty, prints as "", has length 0, and `~` reads it as "". */
TEST(undefined_as_jinja2) {
    static const struct jcase cases[] = {
        {"{% for t in tools %}x{% endfor %}|{% for t in tools %}x{% else %}none{% endfor %}", NULL, "|none"},
        {"[{{ x|trim }}][{{ x|upper }}][{{ x|length }}][{{ x|list }}][{{ x|join(',') }}][{{ x|string }}]",
         NULL, "[][][0][[]][][]"},
        {"{{ 'a' ~ x ~ 'b' }}{{ x|int(5) }}{{ x|default('d') }}{{ x|tojson }}", NULL, "ab5dnull"},
        {"{{ m.missing|trim }}|{{ tools|selectattr('type', 'equalto', 'function')|list|length }}",
         "{\"m\": {}}", "|0"},
    };
    RUN_CASES(cases);
}

TEST(whitespace) {
    static const struct jcase cases[] = {
        {"a  {{- 'b' -}}  c", NULL, "abc"},
        {"{% if true %}\nX\n{% endif %}\n", NULL, "X\n"}, // trim_blocks, and the last newline dropped
        {"  {% if true %}X{% endif %}", NULL, "X"},       // lstrip_blocks
        {"a  {% if true %}X{% endif %}", NULL, "a  X"},   // not at the start of a line
        {"{{ 'x' }}\nY\n", NULL, "x\nY"},                 // after }} the newline stays
        {"a{# c #}b|a {#- c -#} b", NULL, "ab|ab"},
        {"a \n {%- if true -%} \n b{% endif %}", NULL, "ab"},
        {"{% for x in [1, 2] %}\n  {{ x }}\n{% endfor %}", NULL, "  1\n  2\n"},
        {"<{% generation %}x{% endgeneration %}>", NULL, "<x>"}, // transformers' tag, removed
        {"\t{# c #}\nz", NULL, "z"},
    };
    RUN_CASES(cases);
}

/* The error (NULL when it rendered) and its message. */
static bool fails_with(const char *tmpl, const char *ctx, const char *want1, const char *want2) {
    struct ci_err err = {0};
    char *got = render(tmpl, ctx, &err);
    if (got) {
        TEST_FAILF("%s: rendered '%s', want an error", tmpl, got);
        ci_free(got);
        return false;
    }
    if (!strstr(err.msg, want1) || (want2 && !strstr(err.msg, want2))) {
        TEST_FAILF("%s: error '%s', want '%s' and '%s'", tmpl, err.msg, want1, want2 ? want2 : "");
        return false;
    }
    return true;
}

TEST(errors_name_the_line) {
    fails_with("line1\n{{ x + }}", NULL, "syntax error", "line 2");
    fails_with("{% if true %}no end", NULL, "syntax error", "endif");
    fails_with("{% for x in y %}", NULL, "syntax error", NULL);
    fails_with("{{ 'a' }}\n\n{% bogus %}", NULL, "line 3", "Unknown statement");
    fails_with("{{ 'unterminated }}", NULL, "syntax error", NULL);
    fails_with("\n{{ x|nosuchfilter }}", "{\"x\": \"s\"}", "line 2", "nosuchfilter");
    fails_with("{{ x is nosuchtest }}", NULL, "line 1", "Unknown test");
    fails_with("\n\n{{ raise_exception('bad role: ' ~ r) }}", "{\"r\": \"robot\"}", "line 3",
               "bad role: robot");
    fails_with("{{ 1 + undefined_thing }}", NULL, "line 1", "undefined");
    fails_with("{{ none + 1 }}", NULL, "line 1", "null");
    fails_with("{% for x in 5 %}{% endfor %}", NULL, "line 1", "iterable");
    fails_with("{{ 1 // 0 }}", NULL, "division by zero", NULL);
    fails_with("{{ f() }}", NULL, "not a function", NULL);
    fails_with("{% break %}", NULL, "outside a loop", NULL);
    fails_with("{{ x }}", "[1, 2]", "not a JSON object", NULL);
    fails_with("{% set x.y = 1 %}", "{\"x\": {}}", "non-namespace", NULL);
}

TEST(bounds_stop_hostile_templates) {
    struct jinja_limits lim = jinja_limits_default();
    lim.max_steps = 100000;
    lim.max_output = 1000;
    lim.max_memory = 64u << 20;
    lim.max_depth = 200;
    static const struct {
        const char *tmpl, *want;
    } cases[] = {
        {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "steps"},
        {"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "deeper"},
        {"{% for i in range(100000) %}xxxxxxxxxx{% endfor %}", "exceeds 1000 bytes"},
        {"{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
         "memory"},
        {"{{ range(100000000) }}", "range() of more than"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct ci_err err = {0};
        char *got = render_lim(cases[i].tmpl, NULL, &lim, &err);
        if (got || !strstr(err.msg, cases[i].want))
            TEST_FAILF("case %zu: %s (want an error with '%s')", i, got ? "rendered" : err.msg,
                       cases[i].want);
        ci_free(got);
    }
    struct ci_err e2 = {0};
    char *huge = render("{{ range(100000000)|length }}", NULL, &e2); // the default limits: range's own cap
    CHECK(!huge && strstr(e2.msg, "range() of more than"));
    // Deep nesting in the source: a parse error, not a stack overflow.
    char deep[20010];
    memcpy(deep, "{{ ", 3);
    for (int i = 0; i < 10000; i++)
        deep[3 + i] = '(';
    memcpy(deep + 10003, "1 }}", 5);
    struct jinja_template *t = NULL;
    struct ci_err err = {0};
    CHECK(jinja_template_parse(deep, strlen(deep), &t, &err) != CI_OK && strstr(err.msg, "deeper"));
    // A template renders many times, the same each time (it is immutable once parsed).
    CHECK(jinja_template_parse("{% set x = [1] %}{{ x }}", 24, &t, &err) == CI_OK);
    for (int i = 0; i < 3; i++) {
        char *out = NULL;
        size_t len = 0;
        CHECK(jinja_render(t, NULL, NULL, &out, &len, &err) == CI_OK && strcmp(out, "[1]") == 0);
        ci_free(out);
    }
    jinja_template_free(t);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(expressions);
    RUN(filters);
    RUN(tests_and_methods);
    RUN(statements);
    RUN(undefined_as_jinja2);
    RUN(whitespace);
    RUN(errors_name_the_line);
    RUN(bounds_stop_hostile_templates);
    return test_exit_code();
}
