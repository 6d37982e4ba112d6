"""Every Kubernetes call, through one client (`api.KubeApi`) and one error map (`errors`): the rule watch
(`rules`), the targets' watch (`workloads`), HPAs and target ownership (`ownership`), Secret reads (`secrets`),
Event and status writes (`events`, `status`), the leader Lease (`lease`), the client-side request limit
(`ratelimit`). What is written is built in controller/report/."""
