package config

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	logsapi "k8s.io/component-base/logs/api/v1"
	kpv1 "k8s.io/kube-proxy/config/v1alpha1"
	"sigs.k8s.io/yaml"
)

// The configuration file kube-proxy reads with --config, as kubeadm writes
// it into the kube-proxy ConfigMap's config.conf.
const (
	KubeProxyAPIVersion = "kubeproxy.config.k8s.io/v1alpha1"
	KubeProxyKind       = "KubeProxyConfiguration"
)

// KubeProxyConfiguration is kube-proxy's own type
// (k8s.io/kube-proxy/config/v1alpha1, the release of client-go), so that a
// file means field for field what it means to kube-proxy; the methods are
// kube-ipvs' reading of it.
type KubeProxyConfiguration struct {
	kpv1.KubeProxyConfiguration
}

// kubeProxyDecoder knows only v1alpha1: kube-proxy's lenient decoder has
// only that version registered, and so does this one.
func kubeProxyDecoder(strict bool) (runtime.Decoder, error) {
	s := runtime.NewScheme()
	if err := kpv1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("register %s: %w", KubeProxyAPIVersion, err)
	}
	return kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, s, s, kjson.SerializerOptions{Yaml: true, Strict: strict}), nil
}

// DecodeKubeProxy reads a KubeProxyConfiguration (YAML or JSON) as
// kube-proxy's loadConfig does (cmd/kube-proxy/app/options.go): strictly
// first; when only strictness fails (an unknown field, a key in the wrong
// case, a repeated key), leniently, and the strict decoder's complaints
// are returned as warnings, so that a field added by a newer kubeadm does
// not stop the node. A value of the wrong type, a malformed duration or
// another kind is an error, as in kube-proxy. kube-proxy's defaults are
// then filled in, so a file kubeadm wrote (mostly zero values) means what
// it means to kube-proxy.
func DecodeKubeProxy(data []byte) (kp KubeProxyConfiguration, warnings []string, err error) {
	if err := checkKind(data); err != nil {
		return kp, nil, err
	}
	strictDec, err := kubeProxyDecoder(true)
	if err != nil {
		return kp, nil, err
	}
	if _, _, err = strictDec.Decode(data, nil, &kp.KubeProxyConfiguration); err != nil {
		strict, ok := runtime.AsStrictDecodingError(err)
		if !ok {
			return kp, nil, decodeError(data, err)
		}
		kp = KubeProxyConfiguration{}
		lenientDec, lerr := kubeProxyDecoder(false)
		if lerr != nil {
			return kp, nil, lerr
		}
		if _, _, lerr := lenientDec.Decode(data, nil, &kp.KubeProxyConfiguration); lerr != nil {
			return kp, nil, decodeError(data, lerr)
		}
		for _, e := range strict.Errors() {
			warnings = append(warnings, e.Error())
		}
	}
	kp.setDefaults()
	return kp, warnings, nil
}

// checkKind refuses another kind or version with what was expected, rather
// than the decoder's "no kind is registered".
func checkKind(data []byte) error {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return fmt.Errorf("parse: %w", err)
	}
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(j, &tm); err != nil {
		return fmt.Errorf("parse: %w", err)
	}
	if tm.APIVersion != KubeProxyAPIVersion || tm.Kind != KubeProxyKind {
		return fmt.Errorf("want apiVersion %s, kind %s; got apiVersion %q, kind %q", KubeProxyAPIVersion, KubeProxyKind, tm.APIVersion, tm.Kind)
	}
	return nil
}

// decodeError names the path of each malformed duration, which the
// decoder's error (from a field's UnmarshalJSON) does not; other errors
// (a value of the wrong type) already name theirs.
func decodeError(data []byte, err error) error {
	var doc any
	if j, jerr := yaml.YAMLToJSON(data); jerr == nil && yaml.Unmarshal(j, &doc) == nil {
		if errs := durationErrors(reflect.TypeFor[kpv1.KubeProxyConfiguration](), doc, ""); len(errs) > 0 {
			return errors.Join(errs...)
		}
	}
	return fmt.Errorf("decode: %w", err)
}

var (
	durationType       = reflect.TypeFor[metav1.Duration]()
	flushFrequencyType = reflect.TypeFor[logsapi.TimeOrMetaDuration]()
)

// durationErrors walks v (the decoded document) along t and reports each
// duration that does not parse, by its JSON path.
func durationErrors(t reflect.Type, v any, path string) []error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil {
		return nil
	}
	switch t {
	case durationType:
		if err := checkDuration(v, false); err != nil {
			return []error{fmt.Errorf("%s: %w", path, err)}
		}
		return nil
	case flushFrequencyType:
		if err := checkDuration(v, true); err != nil {
			return []error{fmt.Errorf("%s: %w", path, err)}
		}
		return nil
	}
	var errs []error
	switch t.Kind() {
	case reflect.Struct:
		m, _ := v.(map[string]any)
		for i := range t.NumField() {
			sf := t.Field(i)
			name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			switch {
			case sf.Anonymous && name == "":
				errs = append(errs, durationErrors(sf.Type, v, path)...)
			case sf.IsExported() && name != "" && name != "-":
				errs = append(errs, durationErrors(sf.Type, m[name], joinPath(path, name))...)
			}
		}
	case reflect.Slice:
		l, _ := v.([]any)
		for i, e := range l {
			errs = append(errs, durationErrors(t.Elem(), e, fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	return errs
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// checkDuration accepts a duration string ("30s"), and nanoseconds where
// component-base's TimeOrMetaDuration takes them.
func checkDuration(v any, nanos bool) error {
	switch x := v.(type) {
	case string:
		_, err := ParseDuration(x)
		return err
	case float64:
		if nanos {
			return nil
		}
		return fmt.Errorf("want a duration string such as \"30s\", got %v", x)
	}
	return fmt.Errorf("want a duration such as \"30s\", got %v", v)
}

// ParseDuration is time.ParseDuration with errors that say what to write:
// a bare number is missing its unit.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil {
		return d, nil
	}
	if _, numErr := strconv.ParseFloat(s, 64); numErr == nil {
		return 0, fmt.Errorf("a duration needs a unit, e.g. %q", s+"s")
	}
	return 0, fmt.Errorf("want a duration such as 30s, 5m or 1h30m, got %q", s)
}
