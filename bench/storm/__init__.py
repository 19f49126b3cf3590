"""The storm: a red-packet peak played against a running server, then the money audit
and a report. Modules, in the order a run uses them: ``scenario`` (what to play), ``plan`` (the
calls, deterministic from the seed), ``wire`` (tokens, one HTTP request over ``http1``'s client),
``load`` (the open-loop executor), ``proc`` (one load process), ``runner`` (setup, processes,
progress), ``record`` (JSONL record and replay), ``settle`` (drain, audit), ``report`` (the JSON,
with ``series`` and ``delivery``), ``table`` and ``plot`` (terminal and PNG, in the words of
``summary``), ``cli`` (``hongbao storm``), ``demo`` (``make demo``). ``production`` plays one rate
on the production backend and the baseline; ``peak`` climbs rates to each one's knee (``knee``:
the rule, ``meter``: the servers' CPU, ``peak_table``: the tables)."""
