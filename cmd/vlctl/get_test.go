package main

import (
	"bytes"
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// TestWriteDomain: vlctl get prints one row of the Domain's name, libvirt
// name, state and reason; -o json the whole object with KubeVirt's keys.
func TestWriteDomain(t *testing.T) {
	d := &domainjson.Domain{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod"},
		Spec: domainjson.DomainSpec{Name: "prod_web"}, Status: domainjson.DomainStatus{Status: "Paused", Reason: "User"}}
	var b bytes.Buffer
	writeDomain(&b, d)
	want := "NAME      DOMAIN    STATUS  REASON\nprod/web  prod_web  Paused  User\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	writeDomain(&b, &domainjson.Domain{})
	if want := "NAME  DOMAIN  STATUS  REASON\n-     -       -       -\n"; b.String() != want {
		t.Errorf("empty domain:\n%q\nwant\n%q", b.String(), want)
	}
	b.Reset()
	if err := writeDomainJSON(&b, d); err != nil {
		t.Fatal(err)
	}
	var got struct {
		ObjectMeta struct{ Name, Namespace string }
		Spec       struct{ Name string }
		Status     struct{ Status, Reason string }
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("%v:\n%s", err, b.String())
	}
	if got.ObjectMeta.Name != "web" || got.ObjectMeta.Namespace != "prod" || got.Spec.Name != "prod_web" || got.Status.Status != "Paused" || got.Status.Reason != "User" {
		t.Errorf("-o json: %+v\n%s", got, b.String())
	}
}
