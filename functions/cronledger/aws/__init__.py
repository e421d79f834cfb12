"""The Lambda entry points, one module per function, each `handler` named in the stack
(infra/cronledger_infra/functions.py): `reconcile`, `claim`, `execute`, `api`, `migrate`.

A handler parses its event, calls one service, and returns; the Powertools decorators sit on
it. What every function shares lives beside them in three neutral modules: `runtime` (the
Powertools logger, metrics and tracer, and what a container builds once), `database` (the
connection through RDS Proxy) and `emf` (the bridge from `cronledger.metrics` to EMF).
Importing any of these reads nothing but Powertools' own variables and opens nothing.
"""
