"""The live demo: Azurite, real worker processes and the operator's own reconciler, on one machine, no cluster.

- `azurite`: starts and stops an Azurite queue service on 127.0.0.1 and a free port.
- `worker`: the worker the demo scales (`python -m controller.demo.worker`): receives messages with the Azure
  SDK, works on each for a while, deletes it.
- `run`: the demo itself: the rule, the bursts, the reconciler loop, the end condition, the clean-up.
- `view`: the live terminal view. `report`: the HTML report (the simulator's SVG charts).
"""
