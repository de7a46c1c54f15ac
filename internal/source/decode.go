package source

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// Strict decoding: a misspelt field ("sessionAfinity") is a problem, not a
// silently ignored line that leaves the user wondering why nothing happens.
var deserializer = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// objKey names an object across kinds; Nodes have no namespace.
type objKey struct{ kind, namespace, name string }

func (k objKey) String() string {
	if k.namespace == "" {
		return k.kind + " " + k.name
	}
	return k.kind + " " + k.namespace + "/" + k.name
}

// object is one decoded, defaulted and validated object of a file.
type object struct {
	key objKey
	doc int
	obj runtime.Object // *corev1.Service, *discoveryv1.EndpointSlice or *corev1.Node
	// stale marks the last good version of an object whose new version
	// was refused: it is served only where no document of any file reads
	// well for its key (merge).
	stale bool
}

// read is what one object of a file gave: the object, or a refusal with
// the problem that says why (obj nil). A refusal carries the key of the
// object it meant when the document names one (a served kind and a name),
// so that object's last good version can stay; unknown says it names none,
// so it may have been any object of the file.
type read struct {
	object
	problem *Problem
	unknown bool
}

// readDocuments decodes every document of a manifest file, one read per object
// in file order. A file whose documents cannot be told apart is one
// problem, whole.
func readDocuments(path string, data []byte, r rules) ([]read, *Problem) {
	docs, err := splitDocuments(path, data)
	if err != nil {
		return nil, &Problem{File: path, Err: err}
	}
	var reads []read
	for i, doc := range docs {
		reads = append(reads, decodeDocument(path, i+1, doc, r)...)
	}
	return reads, nil
}

// splitDocuments returns the JSON form of each non-empty document. A .json
// file is one document; YAML files may hold several separated by "---".
// Comment-only documents are not counted, so "document 2" is the second
// object a reader sees in the file.
func splitDocuments(path string, data []byte) ([][]byte, error) {
	if strings.HasSuffix(path, ".json") {
		if len(bytes.TrimSpace(data)) == 0 {
			return nil, nil
		}
		return [][]byte{data}, nil
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		chunk, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("split YAML documents: %w", err)
		}
		js, err := yaml.YAMLToJSON(chunk)
		if err != nil {
			// Keep the broken document so it is reported with its number.
			docs = append(docs, chunk)
			continue
		}
		if t := bytes.TrimSpace(js); len(t) == 0 || string(t) == "null" {
			continue
		}
		docs = append(docs, js)
	}
}

// decodeDocument decodes one document: a Service, EndpointSlice, Node, or a
// v1 List of them, one read per object.
func decodeDocument(path string, doc int, data []byte, r rules) []read {
	js := data
	if !json.Valid(data) {
		var err error
		if js, err = yaml.YAMLToJSON(data); err != nil {
			return []read{refused(Problem{File: path, Doc: doc, Err: fmt.Errorf("parse: %w", err)}, objKey{}, true)}
		}
	}
	obj, _, err := deserializer.Decode(js, nil, nil)
	if err != nil {
		key := rawKey(js)
		return []read{refused(Problem{File: path, Doc: doc, Object: describeRaw(js), Err: fmt.Errorf("decode: %w", err)}, key, !names(key))}
	}
	list, ok := obj.(*corev1.List)
	if !ok {
		o, err := prepare(obj, r)
		o.doc = doc
		if err != nil {
			// A decoded kind that is not served is no object of ours;
			// a served one without a name may have been any.
			unknown := served(o.key.kind) && o.key.name == ""
			return []read{refused(Problem{File: path, Doc: doc, Object: describe(obj), Err: err}, o.key, unknown)}
		}
		return []read{{object: o}}
	}
	var reads []read
	for i, item := range list.Items {
		got := decodeDocument(path, doc, item.Raw, r)
		for j := range got {
			if p := got[j].problem; p != nil && p.Object == "" {
				p.Object = fmt.Sprintf("List item %d", i)
			}
		}
		reads = append(reads, got...)
	}
	return reads
}

// refused is the read of an object that is not used.
func refused(p Problem, key objKey, unknown bool) read {
	return read{object: object{key: key, doc: p.Doc}, problem: &p, unknown: unknown}
}

// served reports whether kind is one this source serves.
func served(kind string) bool {
	switch kind {
	case "Service", "EndpointSlice", "Node":
		return true
	}
	return false
}

// names reports whether key names an object this source could serve.
func names(key objKey) bool { return served(key.kind) && key.name != "" }

// prepare defaults and validates a decoded object and keys it.
func prepare(obj runtime.Object, r rules) (object, error) {
	switch o := obj.(type) {
	case *corev1.Service:
		defaultService(o)
		return object{key: keyOf(obj), obj: o}, r.service(o)
	case *discoveryv1.EndpointSlice:
		defaultSlice(o)
		return object{key: keyOf(obj), obj: o}, r.slice(o)
	case *corev1.Node:
		o.Namespace = "" // cluster-scoped
		return object{key: keyOf(obj), obj: o}, r.node(o)
	}
	return object{}, fmt.Errorf("kind %s is not used here: want Service, EndpointSlice, Node or List", kindOf(obj))
}

func keyOf(obj runtime.Object) objKey {
	switch o := obj.(type) {
	case *corev1.Service:
		return objKey{"Service", o.Namespace, o.Name}
	case *discoveryv1.EndpointSlice:
		return objKey{"EndpointSlice", o.Namespace, o.Name}
	case *corev1.Node:
		return objKey{"Node", "", o.Name}
	}
	return objKey{kind: kindOf(obj)}
}

func describe(obj runtime.Object) string {
	switch obj.(type) {
	case *corev1.Service, *discoveryv1.EndpointSlice, *corev1.Node:
		k := keyOf(obj)
		if k.kind != "Node" && k.namespace == "" {
			k.namespace = metav1.NamespaceDefault
		}
		return k.String()
	}
	return kindOf(obj)
}

// describeRaw names an object that did not decode, from its kind and
// metadata, so the report still says which object was meant.
func describeRaw(js []byte) string {
	k := rawKey(js)
	if k.kind == "" {
		return ""
	}
	if k.kind != "Node" && k.namespace == "" {
		k.namespace = metav1.NamespaceDefault
	}
	return k.String()
}

// rawKey is the key an object that did not decode would have had, with
// the defaults prepare gives: the zero key when the document has no kind.
func rawKey(js []byte) objKey {
	var head struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name, Namespace string
		} `json:"metadata"`
	}
	if yaml.Unmarshal(js, &head) != nil || head.Kind == "" {
		return objKey{}
	}
	k := objKey{head.Kind, head.Metadata.Namespace, head.Metadata.Name}
	switch k.kind {
	case "Node":
		k.namespace = ""
	case "Service", "EndpointSlice":
		if k.namespace == "" {
			k.namespace = metav1.NamespaceDefault
		}
	}
	return k
}

func kindOf(obj runtime.Object) string {
	if gvks, _, err := scheme.Scheme.ObjectKinds(obj); err == nil && len(gvks) > 0 {
		return gvks[0].Kind
	}
	return fmt.Sprintf("%T", obj)
}
