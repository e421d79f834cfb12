"""A loopback Lambda API for the benchmarks, in a process of its own so its work does not share
the measured process's interpreter: `python -m tests.bench.loopback_lambda LATENCY_SECS`.

It accepts every Invoke with 202 after `LATENCY_SECS` (what an asynchronous invoke costs on
AWS), prints its URL, and when its standard input closes prints the JSON list of the payloads
it received, then exits.
"""

from __future__ import annotations

import json
import sys

from tests.unit.fixtures_targets import Answer, RecordingServer


def main(latency_secs: float) -> None:
    with RecordingServer(Answer(status=202, body=b"", delay_secs=latency_secs)) as server:
        print(server.url, flush=True)
        sys.stdin.read()
        payloads = [json.loads(r.body) for r in server.received if r.method == "POST"]
    print(json.dumps(payloads), flush=True)


if __name__ == "__main__":
    main(float(sys.argv[1]))
