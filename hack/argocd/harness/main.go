// Command argocd-health evaluates SendGroup objects the way ArgoCD's application controller
// does: it loads an argocd-cm ConfigMap (our gitops/argocd/argocd-cm.yaml) through argo-cd's
// own settings manager (util/settings.SettingsManager.GetResourceOverrides, the call the
// controller makes), then asks the controller's health entry point
// (gitops-engine pkg/health.GetResourceHealth with lua.ResourceHealthOverrides, as in
// argo-cd's controller/health.go) for each object file.
//
// Usage: argocd-health -cm gitops/argocd/argocd-cm.yaml OBJECT.yaml...
// Output: one JSON object per input file on stdout, in order:
//
//	{"path": "...", "status": "Healthy", "message": "...", "error": ""}
//
// status is "" when ArgoCD would have no health for the object (no script) and error holds the
// engine's error text when the script failed (the controller then reports Unknown with it).
// Exit status: 0 when every file was evaluated, 1 on a setup error (unreadable ConfigMap, a
// settings key ArgoCD refuses), 2 on bad usage.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/argoproj/argo-cd/gitops-engine/v3/pkg/health"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/argoproj/argo-cd/v3/util/lua"
	"github.com/argoproj/argo-cd/v3/util/settings"
)

const namespace = "argocd"

type result struct {
	Path    string `json:"path"`
	Status  string `json:"status"`
	Message string `json:"message"`
	Error   string `json:"error"`
}

// loadConfigMap reads the argocd-cm YAML and places it where ArgoCD's settings manager looks:
// name argocd-cm, namespace argocd, label app.kubernetes.io/part-of=argocd.
func loadConfigMap(path string) (*corev1.ConfigMap, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{}
	if err := yaml.UnmarshalStrict(raw, cm); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if cm.Name != "argocd-cm" {
		return nil, fmt.Errorf("%s: metadata.name is %q, ArgoCD reads argocd-cm", path, cm.Name)
	}
	cm.Namespace = namespace
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Labels["app.kubernetes.io/part-of"] = "argocd"
	return cm, nil
}

func main() {
	cmPath := flag.String("cm", "", "argocd-cm ConfigMap YAML (required)")
	flag.Parse()
	if *cmPath == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: argocd-health -cm ARGOCD-CM.yaml OBJECT.yaml...")
		os.Exit(2)
	}
	cm, err := loadConfigMap(*cmPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "argocd-health:", err)
		os.Exit(1)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "argocd-secret",
			Namespace: namespace,
			Labels:    map[string]string{"app.kubernetes.io/part-of": "argocd"},
		},
		Data: map[string][]byte{"server.secretkey": []byte("harness")},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	mgr := settings.NewSettingsManager(ctx, fake.NewClientset(cm, secret), namespace)
	overrides, err := mgr.GetResourceOverrides()
	if err != nil {
		fmt.Fprintln(os.Stderr, "argocd-health: ArgoCD refuses the ConfigMap:", err)
		os.Exit(1)
	}
	out := json.NewEncoder(os.Stdout)
	for _, path := range flag.Args() {
		res := result{Path: path}
		raw, err := os.ReadFile(path)
		obj := &unstructured.Unstructured{}
		if err == nil {
			err = yaml.Unmarshal(raw, &obj.Object)
		}
		if err != nil {
			res.Error = "reading object: " + err.Error()
		} else {
			hs, herr := health.GetResourceHealth(obj, lua.ResourceHealthOverrides(overrides))
			if herr != nil {
				res.Error = herr.Error()
			} else if hs != nil {
				res.Status = string(hs.Status)
				res.Message = hs.Message
			}
		}
		if err := out.Encode(res); err != nil {
			fmt.Fprintln(os.Stderr, "argocd-health:", err)
			os.Exit(1)
		}
	}
}
