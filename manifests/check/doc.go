// Package check tests the shipped manifests as a cluster takes them:
// `kubectl apply -k` of the kustomization and its monitoring components,
// built with kustomize's own library, and the Prometheus Operator objects
// validated against the operator's CustomResourceDefinitions with the API
// server's structural schema validation and pruning.
//
// It is a module of its own so that kustomize and the API server's
// validation stay out of the agent's dependencies.
package check
