"""spec: the pure builders and names under the components (manifests, IAM documents, queue settings, workload facts,
labels and quantities); nothing here imports a provider SDK, so tests, the pack, the planner and `verify` use it
without Pulumi."""
