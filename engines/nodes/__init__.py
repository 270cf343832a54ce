"""Multi-node runs: one serving job spread over several hosts. ``plan`` turns each adapter's
``node_plans`` into per-node launch plans, ``group`` is the runs list's one row per group and the
dashboard's launch, ``hints`` explains rendezvous hangs, ``ray`` runs a node's ``ray start`` as a
servelab run, ``run`` drives a multi-node run (launch, merged log, cross-node root cause) and
``view`` shows the group as one run. The shared value types live in ``engines.adapters.exchange``."""
