"""A virtual clock plus simulated sources and targets that plug into the same reconciler.

- `scenario`: the scenario model and files, the built-in library, the arrival plan;
- `world`: the simulated Azure queue and worker Deployment, in 1-second steps;
- `adapters`: the virtual clock, the simulated source and target, our rules' autoscaler, static and AWS baselines;
- `keda`: the KEDA + HPA baseline, from a ScaledObject;
- `run`: one event loop running every policy over the same arrivals, and the metrics;
- `report`: the text table, the timeline CSV and the HTML report;
- `command`: `queuescale simulate`.
"""
