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
}

// parseFile decodes every document of a manifest file. Any problem rejects
// the whole file (the caller keeps its last good content), so the objects
// are returned only when problems is empty.
func parseFile(path string, data []byte, r rules) ([]object, []Problem) {
	docs, err := splitDocuments(path, data)
	if err != nil {
		return nil, []Problem{{File: path, Err: err}}
	}
	var objs []object
	var problems []Problem
	for i, doc := range docs {
		got, probs := decodeDocument(path, i+1, doc, r)
		objs = append(objs, got...)
		problems = append(problems, probs...)
	}
	if len(problems) > 0 {
		return nil, problems
	}
	return objs, nil
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
// v1 List of them.
func decodeDocument(path string, doc int, data []byte, r rules) ([]object, []Problem) {
	js := data
	if !json.Valid(data) {
		var err error
		if js, err = yaml.YAMLToJSON(data); err != nil {
			return nil, []Problem{{File: path, Doc: doc, Err: fmt.Errorf("parse: %w", err)}}
		}
	}
	obj, _, err := deserializer.Decode(js, nil, nil)
	if err != nil {
		return nil, []Problem{{File: path, Doc: doc, Object: describeRaw(js), Err: fmt.Errorf("decode: %w", err)}}
	}
	list, ok := obj.(*corev1.List)
	if !ok {
		o, err := prepare(obj, r)
		if err != nil {
			return nil, []Problem{{File: path, Doc: doc, Object: describe(obj), Err: err}}
		}
		o.doc = doc
		return []object{o}, nil
	}
	var objs []object
	var problems []Problem
	for i, item := range list.Items {
		got, probs := decodeDocument(path, doc, item.Raw, r)
		for j := range probs {
			if probs[j].Object == "" {
				probs[j].Object = fmt.Sprintf("List item %d", i)
			}
		}
		objs = append(objs, got...)
		problems = append(problems, probs...)
	}
	return objs, problems
}

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
	var head struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name, Namespace string
		} `json:"metadata"`
	}
	if yaml.Unmarshal(js, &head) != nil || head.Kind == "" {
		return ""
	}
	k := objKey{head.Kind, head.Metadata.Namespace, head.Metadata.Name}
	if k.kind != "Node" && k.namespace == "" {
		k.namespace = metav1.NamespaceDefault
	}
	return k.String()
}

func kindOf(obj runtime.Object) string {
	if gvks, _, err := scheme.Scheme.ObjectKinds(obj); err == nil && len(gvks) > 0 {
		return gvks[0].Kind
	}
	return fmt.Sprintf("%T", obj)
}
