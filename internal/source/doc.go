// Package source fills a objects.Store from where the cluster objects come
// from: client-go informers (Kubernetes) or a folder of YAML/JSON manifests
// (Manifests). Sources only put objects in the store; the store marks what
// changed and the reconciler decides what to do about it.
package source

// SourcesKubernetes are the names the Kubernetes source marks synced; a store
// fed by it must be created with objects.NewStore(SourcesKubernetes...).
var SourcesKubernetes = []string{SourceServices, SourceEndpointSlices, SourceNode, SourceNodes}

// Source names, as given to objects.Store.SetSynced.
const (
	SourceServices       = "services"
	SourceEndpointSlices = "endpointslices"
	SourceNode           = "node"
	SourceNodes          = "nodes" // every Node's addresses
	SourceManifests      = "manifests"
)
