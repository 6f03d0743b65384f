"""Numeric comparison: run both sides layer by layer, forward and backward, and compare.

What lives where, from the entry point down:

- ``compare``: ``compare_numeric``, seed after seed, and the ``NumericResult``;
- ``options``: ``NumericOptions`` (seeds, transfer, isolated, contexts, tolerances, repro);
- ``sides``: ``Backends`` (runners, arithmetic, repro writers, handed down by the front
  door) and ``Sides``, what stays fixed over the seeds;
- ``pairing``: the two graphs' correspondence, computed once: node maps, parameter pairs,
  which rhs value is which lhs value;
- ``feeds``: inputs per seed, weights moved lhs -> rhs, the loss that starts the backward;
- ``paired``: ``PairedRun``, one seed: lhs run, then rhs compared layer by layer;
- ``engine``: ``Execution``, one graph on one runner, forward and backward (the interpreter
  loop of ``specgraph.interpreter`` with the runner's kernels);
- ``lhs_values``: lhs's values kept in a store, or remade; ``store``: the store itself;
- ``record``: ``Measurements``, the plain record of what was measured;
- ``localize``: ``Localizer``, what a divergence reports and who is blamed;
- ``findings``: those findings in words; ``oracle``: the fp64 truth of one node;
- ``stats``: distances and tolerances; ``arrays``: where the arithmetic happens;
- ``runner``: the ``Runner`` base every framework's runner implements, and ``Context``;
- ``result``: plain-data results for renderers; ``repro``: the first divergence as scripts.
"""
