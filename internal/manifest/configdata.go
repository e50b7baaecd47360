package manifest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// ConfigMap is a ConfigMap of the input: its keys and their contents, the
// files a pod sees where it is mounted.
type ConfigMap struct {
	Doc
	Data map[string][]byte
}

// Secret is a Secret of the input, data decoded from base64 and stringData
// laid over it, as the API server stores it.
type Secret struct {
	Doc
	Data map[string][]byte
}

// keyPattern is Kubernetes' rule for ConfigMap and Secret keys (they become
// file names): letters, digits, '-', '_' and '.', and not "." or "..".
var keyPattern = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)

const maxKeyLen = 253

func checkKey(field, k string) error {
	if len(k) > maxKeyLen || !keyPattern.MatchString(k) || k == "." || k == ".." {
		return fmt.Errorf("%s: key %q is not a valid key: letters, digits, '-', '_' and '.', at most %d, and neither \".\" nor \"..\"", field, k, maxKeyLen)
	}
	return nil
}

// strictDecode decodes a document into out, refusing fields out does not
// have, so a misspelt key is not silently dropped.
func strictDecode(d Doc, out any) error {
	dec := json.NewDecoder(bytes.NewReader(d.JSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("%s: %w", d.Kind, err)
	}
	return nil
}

func decodeConfigMap(d Doc) (ConfigMap, error) {
	var cm corev1.ConfigMap
	if err := strictDecode(d, &cm); err != nil {
		return ConfigMap{}, err
	}
	if cm.Name == "" {
		return ConfigMap{}, fmt.Errorf("metadata.name: required")
	}
	out := ConfigMap{Doc: d, Data: map[string][]byte{}}
	for k, v := range cm.Data {
		if err := checkKey("data", k); err != nil {
			return ConfigMap{}, err
		}
		out.Data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		if err := checkKey("binaryData", k); err != nil {
			return ConfigMap{}, err
		}
		if _, dup := out.Data[k]; dup {
			return ConfigMap{}, fmt.Errorf("binaryData: key %q is in data too", k)
		}
		out.Data[k] = v
	}
	return out, nil
}

func decodeSecret(d Doc) (Secret, error) {
	var s corev1.Secret
	// data's values are base64, which encoding/json decodes into []byte
	// (and refuses when it is not base64).
	if err := strictDecode(d, &s); err != nil {
		return Secret{}, err
	}
	if s.Name == "" {
		return Secret{}, fmt.Errorf("metadata.name: required")
	}
	out := Secret{Doc: d, Data: map[string][]byte{}}
	for k, v := range s.Data {
		if err := checkKey("data", k); err != nil {
			return Secret{}, err
		}
		out.Data[k] = v
	}
	// The API server writes stringData over data, key by key.
	for k, v := range s.StringData {
		if err := checkKey("stringData", k); err != nil {
			return Secret{}, err
		}
		out.Data[k] = []byte(v)
	}
	return out, nil
}

// ConfigMap finds the ConfigMap name for a VM of namespace ns.
func (s *Set) ConfigMap(name, ns string) (ConfigMap, bool) {
	for _, c := range s.ConfigMaps {
		if c.Name == name && inNamespace(c.Namespace, ns) {
			return c, true
		}
	}
	return ConfigMap{}, false
}

// Secret finds the Secret name for a VM of namespace ns.
func (s *Set) Secret(name, ns string) (Secret, bool) {
	for _, c := range s.Secrets {
		if c.Name == name && inNamespace(c.Namespace, ns) {
			return c, true
		}
	}
	return Secret{}, false
}

// Keys are data's keys in order, so files are written (and ISOs built)
// the same way every time.
func Keys(data map[string][]byte) []string {
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
