"""The public transforms' signatures, as an IDE reads them: every option by name, none in a **kwargs catch-all."""

import inspect
import typing

import pytest
import scipy.optimize

import symgrad as sg
from symgrad.compile.function import BACKENDS
from symgrad.trace import api

OPTIONS = {  # the options each transform documents, by name
    "grad": ("argnums", "has_aux", "static_argnums", "static_argnames", "backend"),
    "value_and_grad": ("argnums", "has_aux", "static_argnums", "static_argnames", "backend", "params"),
    "jacobian": ("argnums", "has_aux", "static_argnums", "static_argnames", "backend", "sparse"),
    "jacfwd": ("argnums", "has_aux", "static_argnums", "static_argnames", "backend", "sparse"),
    "jacrev": ("argnums", "has_aux", "static_argnums", "static_argnames", "backend", "sparse"),
    "hessian": ("argnums", "has_aux", "static_argnums", "static_argnames", "backend", "sparse"),
    "hvp": ("argnums", "static_argnums", "static_argnames", "backend", "params"),
    "jvp": ("has_aux", "backend"),
    "vjp": ("has_aux", "backend"),
    "linearize": ("has_aux", "backend"),
    "vmap": ("in_axes", "out_axes", "backend"),
    "jit": ("static_argnums", "static_argnames", "backend"),
    "minimize": ("args", "bounds", "constraints", "method", "options", "library"),
}


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_every_option_is_a_named_parameter(name):
    parameters = inspect.signature(getattr(sg, name)).parameters
    assert set(OPTIONS[name]) <= set(parameters), name
    assert not [p for p in parameters.values() if p.kind is p.VAR_KEYWORD], f"sg.{name} has a **kwargs catch-all"
    # the annotations resolve (an IDE shows them; SciPy's names are imported for type checkers only)
    hints = typing.get_type_hints(getattr(sg, name), localns={"scipy": scipy})
    assert "return" in hints and all(o in hints for o in OPTIONS[name]), name


def test_an_unknown_keyword_is_named_with_those_accepted():
    with pytest.raises(TypeError, match=r"sg.grad\(\) got an unexpected keyword argument 'has_axu' "
                                        r"\(did you mean 'has_aux'\?\); accepted: .*static_argnums"):
        sg.grad(lambda x: x, has_axu=True)
    with pytest.raises(TypeError, match="sg.jacfwd.*unexpected keyword argument 'argnum' .*'argnums'"):
        sg.jacfwd(lambda x: x, argnum=0)
    with pytest.raises(TypeError, match="sg.vjp.*unexpected keyword argument 'backned'"):
        sg.vjp(lambda x: x, 1.0, backned="vm")
    with pytest.raises(TypeError, match="sg.vmap.*unexpected keyword argument 'in_axis'"):
        sg.vmap(lambda x: x, in_axis=0)


def test_options_of_the_function_form_are_refused_with_expressions():
    x, y = sg.symbols("x y")
    assert sg.grad(x * y, [x, y], has_aux=False) == [y, x]  # left at its default: fine
    with pytest.raises(TypeError, match=r"sg.grad\(\): has_aux applies to a Python function, not to expressions"):
        sg.grad(x * y, [x, y], has_aux=True)
    with pytest.raises(TypeError, match=r"sg.hessian\(\): argnums, static_argnums applies to a Python function"):
        sg.hessian(x * y, [x, y], argnums=0, static_argnums=1)
    with pytest.raises(TypeError, match=r"sg.value_and_grad\(\): params applies to expressions"):
        sg.value_and_grad(lambda a: a, params=[x])


def test_the_backend_hint_lists_the_backends():
    assert typing.get_args(api.Backend) == BACKENDS
