"""The Lambda entry points, one module per function, each `handler` named in the stack
(infra/cronledger_infra/functions.py). What they share lives in `runtime`, `database` and `emf`,
whose import reads nothing but Powertools' own variables and opens nothing.
"""
