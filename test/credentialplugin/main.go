// Command credentialplugin is an image credential provider plugin for the
// tests (credentialprovider.kubelet.k8s.io/v1): it answers every request
// with the username and password it is given for the registry glob it is
// given, and appends each request to a log the test reads.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	glob := flag.String("registry", "", "registry glob the credentials are for")
	user := flag.String("user", "", "username")
	password := flag.String("password", "", "password")
	cacheKey := flag.String("cache-key-type", "Registry", "Image, Registry or Global")
	flag.Parse()
	req, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err)
	}
	if log := os.Getenv("PLUGIN_LOG"); log != "" {
		f, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			fail(err)
		}
		fmt.Fprintf(f, "%s\n", req)
		f.Close()
	}
	var in struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Image      string `json:"image"`
	}
	if err := json.Unmarshal(req, &in); err != nil || in.Kind != "CredentialProviderRequest" {
		fail(fmt.Errorf("not a CredentialProviderRequest: %s", req))
	}
	out := map[string]any{
		"apiVersion": in.APIVersion, "kind": "CredentialProviderResponse", "cacheKeyType": *cacheKey,
		"auth": map[string]any{*glob: map[string]string{"username": *user, "password": *password}},
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "credentialplugin:", err)
	os.Exit(1)
}
