"""The live demo: Azurite, real worker processes and the operator's own reconciler, on one machine, no cluster.

- `azurite`: starts and stops an Azurite queue service on 127.0.0.1 and a free port.
- `worker`: the worker the demo scales (`python -m controller.demo.worker`): receives messages with the Azure
  SDK, works on each for a while, deletes it.
- `harness`: what both live runs stand on: Azurite, the queue, the workers, the reconciler loop, the clean-up
  of every process by PID.
- `run`: the default demo: the bursts, the end condition, the summary. `record`: its rule and what it saw.
- `live`: `demo --scenario`: a simulator scenario's arrivals and workers, live, measured against the simulator
  (`measure`).
- `view`: the live terminal view. `report`: the HTML report (the simulator's SVG charts).
"""
