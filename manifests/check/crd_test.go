package check

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

// crdSchema is one served version of a CustomResourceDefinition, ready to
// check objects as the API server does on create.
type crdSchema struct {
	structural *structuralschema.Structural
	validator  validation.SchemaValidator
}

// loadCRDs reads testdata/crds into schemas by "apiVersion kind".
func loadCRDs(t *testing.T) map[string]crdSchema {
	t.Helper()
	paths, err := filepath.Glob("testdata/crds/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("testdata/crds: %v %v", paths, err)
	}
	out := map[string]crdSchema{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &crd); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, v := range crd.Spec.Versions {
			s, err := newCRDSchema(v.Schema.OpenAPIV3Schema)
			if err != nil {
				t.Fatalf("%s %s: %v", p, v.Name, err)
			}
			out[crd.Spec.Group+"/"+v.Name+" "+crd.Spec.Names.Kind] = s
		}
	}
	return out
}

// newCRDSchema converts a version's schema as the API server does: to a
// structural schema (for pruning) and an OpenAPI v3 validator.
func newCRDSchema(v1 *apiextensionsv1.JSONSchemaProps) (crdSchema, error) {
	var internal apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v1, &internal, nil); err != nil {
		return crdSchema{}, fmt.Errorf("convert: %w", err)
	}
	s, err := structuralschema.NewStructural(&internal)
	if err != nil {
		return crdSchema{}, fmt.Errorf("structural: %w", err)
	}
	if errs := structuralschema.ValidateStructural(nil, s); len(errs) > 0 {
		return crdSchema{}, fmt.Errorf("not structural: %v", errs.ToAggregate())
	}
	v, _, err := validation.NewSchemaValidator(&internal)
	if err != nil {
		return crdSchema{}, fmt.Errorf("validator: %w", err)
	}
	return crdSchema{structural: s, validator: v}, nil
}

// check returns what the API server would say of obj: the schema's
// violations (a create is refused) and the fields it does not know (pruned
// silently, or refused by kubectl's server-side field validation).
func (s crdSchema) check(obj map[string]any) []string {
	var out []string
	for _, e := range validation.ValidateCustomResource(nil, obj, s.validator) {
		out = append(out, e.Error())
	}
	for _, f := range pruning.PruneWithOptions(obj, s.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}) {
		out = append(out, "unknown field "+f)
	}
	return out
}

var schemas map[string]crdSchema

// validate checks a custom object against its CRD and returns it as the
// API server decodes JSON (integers int64, numbers float64).
func validate(t *testing.T, o object) map[string]any {
	t.Helper()
	if schemas == nil {
		schemas = loadCRDs(t)
	}
	obj := unstructured(t, o.YAML)
	key := fmt.Sprint(obj["apiVersion"], " ", obj["kind"])
	s, ok := schemas[key]
	if !ok {
		t.Fatalf("%s: no CRD for %s in testdata/crds", o.id(), key)
	}
	if errs := s.check(unstructured(t, o.YAML)); len(errs) > 0 {
		t.Errorf("%s against its CRD:\n  %s", o.id(), strings.Join(errs, "\n  "))
	}
	return obj
}

func unstructured(t *testing.T, data []byte) map[string]any {
	t.Helper()
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(j, &obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

// The CRD check refuses what the API server refuses, and names the fields
// it does not know: so a shipped object that passes it is one the cluster
// takes as written.
func TestCRDSchemaCheckFindsErrors(t *testing.T) {
	schemas := loadCRDs(t)
	for _, tc := range []struct {
		name, key, doc, want string
	}{
		{"valid", "monitoring.coreos.com/v1 ServiceMonitor", `
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: a}
spec:
  selector: {matchLabels: {a: b}}
  endpoints: [{port: http-metrics}]`, ""},
		{"wrong type", "monitoring.coreos.com/v1 ServiceMonitor", `
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: a}
spec:
  selector: {matchLabels: {a: b}}
  endpoints: [{port: 10249}]`, "spec.endpoints[0].port: Invalid value"},
		{"missing required", "monitoring.coreos.com/v1 ServiceMonitor", `
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: a}
spec:
  endpoints: [{port: http-metrics}]`, "spec.selector: Required value"},
		{"misspelt field", "monitoring.coreos.com/v1 ServiceMonitor", `
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: a}
spec:
  jobLabels: jobLabel
  selector: {matchLabels: {a: b}}
  endpoints: [{port: http-metrics}]`, "unknown field spec.jobLabels"},
		{"rule without expr", "monitoring.coreos.com/v1 PrometheusRule", `
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata: {name: a}
spec:
  groups: [{name: g, rules: [{alert: A}]}]`, "spec.groups[0].rules[0].expr: Required value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := strings.Join(schemas[tc.key].check(unstructured(t, []byte(tc.doc))), "\n")
			if tc.want == "" && errs != "" || !strings.Contains(errs, tc.want) {
				t.Errorf("got %q, want %q", errs, tc.want)
			}
		})
	}
}
