"""Solvers on symgrad's derivatives: ``sg.minimize`` (``optimize``) and IPOPT's C interface (``ipopt``)."""
