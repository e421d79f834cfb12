"""A loopback Lambda API for the benchmarks, in a process of its own so its work does not share
the measured process's interpreter: `python -m tests.bench.loopback_lambda LATENCY_SECS`.

It accepts every Invoke with 202 after `LATENCY_SECS` (what an asynchronous invoke costs on
AWS), prints its URL, and when its standard input closes prints the JSON list of the payloads
it received, then exits. Its listen backlog holds every lane's connection at once: with the
socketserver default of 5, a burst's sixteen lanes connecting together lost SYNs and waited a
second for the retransmit, a stall no Lambda endpoint has.
"""

from __future__ import annotations

import json
import sys
from http.server import ThreadingHTTPServer

from tests.unit.fixtures_targets import Answer, RecordingServer

#: Connections waiting to be accepted (this process serves nothing else).
BACKLOG = 128


def main(latency_secs: float) -> None:
    ThreadingHTTPServer.request_queue_size = BACKLOG
    with RecordingServer(Answer(status=202, body=b"", delay_secs=latency_secs)) as server:
        print(server.url, flush=True)
        sys.stdin.read()
        payloads = [json.loads(r.body) for r in server.received if r.method == "POST"]
    print(json.dumps(payloads), flush=True)


if __name__ == "__main__":
    main(float(sys.argv[1]))
