/* The Jinja built-ins, with @huggingface/jinja's behaviour: the filters (tojson, trim, length, items,
 * selectattr/rejectattr, map(attribute=), join, upper, lower, title, capitalize, default, first, last, list,
 * string, int, float, abs, replace, unique, sort, reverse, indent, safe, dictsort, ... and a few of jinja2's
 * that it lacks: count, round, sum, min, max, escape/e, batch), the tests (defined, none, string, number,
 * mapping, equalto, ...), the methods of strings (split, strip, startswith, replace, ...), dicts (get, items,
 * keys, values) and lists (append: jinja2's), and the globals (range, namespace, raise_exception,
 * strftime_now, dict, true/false/none in both cases). */
#ifndef CINFER_CHAT_JINJA_BUILTINS_H
#define CINFER_CHAT_JINJA_BUILTINS_H

#include "chat/jinja_parse.h"

/* obj.prop / obj[prop]: a dict's key or method, a list's or string's element (negative from the end) or
 * method; undefined when absent. */
struct jv jinja_member(struct jinterp *I, struct jv obj, struct jv prop, int line);
/* operand | filter, where filter is a JN_IDENT or a JN_CALL node; a call's arguments come evaluated: args the
 * positional ones (a JV_ARRAY), kwargs the keyword ones (a JV_KWARGS). */
struct jv jinja_filter(struct jinterp *I, struct jv operand, const struct jnode *filter, struct jv args,
                       struct jv kwargs, int line);
/* `a is name` (arg: the test's argument, NULL if none). */
bool jinja_test(struct jinterp *I, struct jstr name, struct jv a, const struct jv *arg, int line);
/* Calls a built-in function or method (args: a JV_ARRAY, keyword arguments last as one JV_KWARGS). */
struct jv jinja_builtin_call(struct jinterp *I, const struct jfunc *f, struct jv args, int line);
/* Sets the globals in vars (a JV_OBJECT: the global scope's variables). */
void jinja_globals(struct jinterp *I, struct jv vars);

#endif
