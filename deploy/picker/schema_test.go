package picker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// The manifests of deploy/kubernetes, checked here the way an API server
// with strict field validation checks what it is sent, offline, with
// Kubernetes' own libraries at the versions this module pins: built-in
// kinds decode strictly into their types (client-go's scheme: an unknown
// or duplicated field, or a value of the wrong type, is an error), and
// custom resources are validated against their CRDs' schemas and pruned
// (apiextensions-apiserver's validator and pruning: a missing required
// field, a value outside an enum or an unknown field is an error). The
// CRDs are the Inference Extension's InferencePool, as the module at the
// pinned version ships it, and deploy/kubernetes/crds (HTTPRoute: a minimal
// schema of the fields used, the Gateway API module not being a dependency).
var manifestFiles = []string{"../kubernetes/corral.yaml", "../kubernetes/inferencepool.yaml"}

func TestManifestSchemas(t *testing.T) {
	v := newValidator(t)
	for _, gvk := range []schema.GroupVersionKind{
		{Group: "inference.networking.k8s.io", Version: "v1", Kind: "InferencePool"},
		{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "HTTPRoute"},
	} {
		if len(v.crds[gvk]) == 0 {
			t.Fatalf("no schema for %s", gvk)
		}
	}
	n := 0
	for _, file := range manifestFiles {
		for i, doc := range documents(t, file) {
			if err := v.validate(doc); err != nil {
				t.Errorf("%s, object %d: %v", file, i+1, err)
			}
			n++
		}
	}
	if n < 10 {
		t.Errorf("validated %d objects, want the 10 the files hold", n)
	}
}

// TestManifestSchemasRefuse: the checks above refuse what an API server
// would.
func TestManifestSchemasRefuse(t *testing.T) {
	v := newValidator(t)
	const pool = "apiVersion: inference.networking.k8s.io/v1\nkind: InferencePool\nmetadata: {name: p}\n"
	const picker = "endpointPickerRef: {name: e, port: {number: 9002}}"
	if err := v.validate([]byte(pool + "spec: {selector: {matchLabels: {a: b}}, targetPorts: [{number: 8080}], " + picker + "}\n")); err != nil {
		t.Fatalf("a valid InferencePool: %v", err)
	}
	for _, tc := range []struct{ name, doc, want string }{
		{"unknown field", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {replica: 2}\n", `unknown field "spec.replica"`},
		{"wrong type", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: http}]}\n", "port"},
		{"duplicate field", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: x, a: y}\n", `"a"`},
		{"unknown kind", "apiVersion: v1\nkind: Servic\nmetadata: {name: s}\n", "Servic"},
		{"missing required", pool + "spec: {targetPorts: [{number: 8080}], " + picker + "}\n", "spec.selector: Required"},
		{"outside an enum", pool + "spec: {selector: {matchLabels: {a: b}}, targetPorts: [{number: 8080}], endpointPickerRef: {name: e, port: {number: 9002}, failureMode: FailClosed}}\n", "failureMode: Unsupported value"},
		{"out of range", pool + "spec: {selector: {matchLabels: {a: b}}, targetPorts: [{number: 80800}], " + picker + "}\n", "number"},
		{"custom unknown field", pool + "spec: {selector: {matchLabels: {a: b}}, targetPorts: [{number: 8080}], extensionRef: {name: e}, " + picker + "}\n", `unknown field "spec.extensionRef"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := v.validate([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
}

// crdSchema is one version's schema of a CRD, ready to validate with.
type crdSchema struct {
	source     string
	validator  validation.SchemaValidator
	structural *structuralschema.Structural
}

type manifestValidator struct {
	strict runtime.Decoder
	crds   map[schema.GroupVersionKind][]crdSchema
}

func newValidator(t *testing.T) *manifestValidator {
	t.Helper()
	v := &manifestValidator{
		strict: serializer.NewCodecFactory(clientgoscheme.Scheme, serializer.EnableStrict).UniversalDeserializer(),
		crds:   map[schema.GroupVersionKind][]crdSchema{},
	}
	files, err := filepath.Glob("../kubernetes/crds/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in ../kubernetes/crds: %v", err)
	}
	// The Inference Extension's own InferencePool CRD, from the module the
	// go command fetched for these tests.
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api-inference-extension").Output()
	if err != nil {
		t.Fatalf("go list -m sigs.k8s.io/gateway-api-inference-extension: %v", err)
	}
	files = append(files, filepath.Join(strings.TrimSpace(string(out)), "config/crd/bases/inference.networking.k8s.io_inferencepools.yaml"))

	sch := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(sch); err != nil {
		t.Fatal(err)
	}
	dec := serializer.NewCodecFactory(sch, serializer.EnableStrict).UniversalDeserializer()
	for _, file := range files {
		for _, doc := range documents(t, file) {
			var crd apiextensionsv1.CustomResourceDefinition
			if _, _, err := dec.Decode(doc, nil, &crd); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			for _, ver := range crd.Spec.Versions {
				s, err := newCRDSchema(ver.Schema)
				if err != nil {
					t.Fatalf("%s, %s: %v", file, ver.Name, err)
				}
				s.source = filepath.Base(file)
				gvk := schema.GroupVersionKind{Group: crd.Spec.Group, Version: ver.Name, Kind: crd.Spec.Names.Kind}
				v.crds[gvk] = append(v.crds[gvk], s)
			}
		}
	}
	return v
}

// newCRDSchema converts a CRD version's schema as the API server does and
// checks that it is structural.
func newCRDSchema(cv *apiextensionsv1.CustomResourceValidation) (crdSchema, error) {
	if cv == nil || cv.OpenAPIV3Schema == nil {
		return crdSchema{}, errors.New("no openAPIV3Schema")
	}
	var internal apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(cv.OpenAPIV3Schema, &internal, nil); err != nil {
		return crdSchema{}, err
	}
	st, err := structuralschema.NewStructural(&internal)
	if err != nil {
		return crdSchema{}, err
	}
	if errs := structuralschema.ValidateStructural(nil, st); len(errs) > 0 {
		return crdSchema{}, fmt.Errorf("not structural: %v", errs.ToAggregate())
	}
	val, _, err := validation.NewSchemaValidator(&internal)
	if err != nil {
		return crdSchema{}, err
	}
	return crdSchema{validator: val, structural: st}, nil
}

// validate checks one YAML document.
func (v *manifestValidator) validate(doc []byte) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	var u unstructured.Unstructured
	if err := u.UnmarshalJSON(j); err != nil {
		return err
	}
	schemas, ok := v.crds[u.GroupVersionKind()]
	if !ok {
		_, _, err := v.strict.Decode(j, nil, nil)
		return err
	}
	var errs []error
	for _, s := range schemas {
		if fe := validation.ValidateCustomResource(nil, u.UnstructuredContent(), s.validator); len(fe) > 0 {
			errs = append(errs, fmt.Errorf("%s: %w", s.source, fe.ToAggregate()))
		}
		obj := runtime.DeepCopyJSON(u.UnstructuredContent())
		unknown := pruning.PruneWithOptions(obj, s.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
		for _, path := range unknown {
			errs = append(errs, fmt.Errorf("%s: unknown field %q", s.source, path))
		}
	}
	return errors.Join(errs...)
}

// documents splits a YAML file into its documents, leaving out empty ones.
func documents(t *testing.T, file string) [][]byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if j, err := yaml.YAMLToJSON(doc); err == nil && !bytes.Equal(bytes.TrimSpace(j), []byte("null")) {
			docs = append(docs, doc)
		}
	}
}
