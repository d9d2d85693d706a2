package images

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distribution/reference"
	"github.com/nodelet/nodelet/pkg/pods/poddirs"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// A private image pulled for one pod must not serve another pod that
// could not have pulled it: the node keeps, per image it pulled, which
// credentials pulled it (upstream's ImagePulledRecord, in upstream's
// place and format, so records carry over between nodelet and the
// kubelet), and a pod whose credentials are not among them pulls the
// image again with its own before it may use it
// (imagePullCredentialsVerificationPolicy,
// KubeletEnsureSecretPulledImages).

// Verification policies, as KubeletConfiguration names them.
const (
	NeverVerify                  = "NeverVerify"
	NeverVerifyPreloadedImages   = "NeverVerifyPreloadedImages"
	NeverVerifyAllowlistedImages = "NeverVerifyAllowlistedImages"
	AlwaysVerify                 = "AlwaysVerify"
)

// VerifyPolicy decides which present images a pod must prove access to.
type VerifyPolicy struct {
	policy   string
	exact    map[string]bool
	prefixes []string
}

// NewVerifyPolicy checks a policy and its allowlist ("" is the default,
// NeverVerifyPreloadedImages). Allowlist entries are image names without
// tag or digest, or prefixes ending in "/*".
func NewVerifyPolicy(policy string, allowlist []string) (VerifyPolicy, error) {
	if policy == "" {
		policy = NeverVerifyPreloadedImages
	}
	p := VerifyPolicy{policy: policy, exact: map[string]bool{}}
	switch policy {
	case NeverVerify, NeverVerifyPreloadedImages, AlwaysVerify:
		if len(allowlist) > 0 {
			return p, fmt.Errorf("preloadedImagesVerificationAllowlist is only read with imagePullCredentialsVerificationPolicy %s", NeverVerifyAllowlistedImages)
		}
	case NeverVerifyAllowlistedImages:
	default:
		return p, fmt.Errorf("imagePullCredentialsVerificationPolicy %q: want %s, %s, %s or %s", policy, NeverVerify, NeverVerifyPreloadedImages, NeverVerifyAllowlistedImages, AlwaysVerify)
	}
	for _, pattern := range allowlist {
		if err := p.allow(pattern); err != nil {
			return p, fmt.Errorf("preloadedImagesVerificationAllowlist: %w", err)
		}
	}
	return p, nil
}

func (p *VerifyPolicy) allow(pattern string) error {
	if pattern != strings.TrimSpace(pattern) || pattern == "" {
		return fmt.Errorf("%q: empty, or spaces around it", pattern)
	}
	if prefix, ok := strings.CutSuffix(pattern, "/*"); ok {
		if prefix == "" || strings.Contains(prefix, "*") {
			return fmt.Errorf("%q: a wildcard needs at least a registry host, and only a final /* is allowed", pattern)
		}
		p.prefixes = append(p.prefixes, prefix+"/")
		return nil
	}
	name, err := imageName(pattern)
	if err != nil || name != pattern || strings.Contains(pattern, "*") {
		return fmt.Errorf("%q: want an image name without tag or digest, or a prefix ending in /*", pattern)
	}
	p.exact[pattern] = true
	return nil
}

// mustVerify says whether a pod must prove access to a present image.
func (p VerifyPolicy) mustVerify(image string, pulledByNode bool) bool {
	switch p.policy {
	case NeverVerify:
		return false
	case AlwaysVerify:
		return true
	case NeverVerifyAllowlistedImages:
		name, err := imageName(image)
		if err != nil {
			name = image
		}
		if p.exact[name] {
			return false
		}
		for _, prefix := range p.prefixes {
			if strings.HasPrefix(name, prefix) {
				return false
			}
		}
		return true
	}
	return pulledByNode // NeverVerifyPreloadedImages
}

// imageName is an image without its tag and digest, the key credentials
// are recorded under.
func imageName(image string) (string, error) {
	parsed, err := reference.Parse(image)
	if err != nil {
		return "", err
	}
	if d, ok := parsed.(reference.Digested); ok {
		image = strings.TrimSuffix(image, "@"+d.Digest().String())
	}
	if t, ok := parsed.(reference.Tagged); ok {
		image = strings.TrimSuffix(image, ":"+t.Tag())
	}
	return image, nil
}

// puller is who pulled an image: the node (anonymously or with its own
// credentials, which every pod on it may use) or a pod's pull secret.
type puller struct {
	node   bool
	secret *kubeletv1beta1.ImagePullSecret
}

// PullRecords is the node's record of the pulls it made, on disk:
// <root>/image_manager/pulling/ holds an intent per image being pulled
// (a pull cut short still counts as the node's), pulled/ a record per
// image pulled.
type PullRecords struct {
	pulling, pulled string
	now             func() time.Time
	mu              sync.Mutex
}

// NewPullRecords keeps records under rootDir; "" keeps none and requires
// no verification of anything.
func NewPullRecords(rootDir string, now func() time.Time) *PullRecords {
	if rootDir == "" {
		return nil
	}
	return &PullRecords{pulling: filepath.Join(rootDir, "image_manager", "pulling"),
		pulled: filepath.Join(rootDir, "image_manager", "pulled"), now: now}
}

func recordFile(key string) string { return fmt.Sprintf("sha256-%x", sha256.Sum256([]byte(key))) }

// intend writes the intent to pull an image, before the pull.
func (r *PullRecords) intend(image string) error {
	return writeRecord(r.pulling, recordFile(image), kubeletv1beta1.ImagePullIntent{
		TypeMeta: metav1.TypeMeta{APIVersion: kubeletv1beta1.SchemeGroupVersion.String(), Kind: "ImagePullIntent"}, Image: image})
}

// done records who pulled an image and drops the intent.
func (r *PullRecords) done(image, imageRef string, by puller) error {
	name, err := imageName(image)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, _, err := r.read(imageRef)
	if err != nil {
		rec = nil // an unreadable record is replaced
	}
	if rec == nil {
		rec = &kubeletv1beta1.ImagePulledRecord{
			TypeMeta: metav1.TypeMeta{APIVersion: kubeletv1beta1.SchemeGroupVersion.String(), Kind: "ImagePulledRecord"},
			ImageRef: imageRef, CredentialMapping: map[string]kubeletv1beta1.ImagePullCredentials{}}
	}
	creds := rec.CredentialMapping[name]
	switch {
	case by.node:
		creds.NodePodsAccessible = true
	case by.secret != nil && !slices.Contains(creds.KubernetesSecrets, *by.secret):
		creds.KubernetesSecrets = append(creds.KubernetesSecrets, *by.secret)
	}
	rec.CredentialMapping[name] = creds
	rec.LastUpdatedTime = metav1.NewTime(r.now())
	if err := writeRecord(r.pulled, recordFile(imageRef), rec); err != nil {
		return err
	}
	return os.Remove(filepath.Join(r.pulling, recordFile(image)))
}

func (r *PullRecords) read(imageRef string) (*kubeletv1beta1.ImagePulledRecord, bool, error) {
	data, err := os.ReadFile(filepath.Join(r.pulled, recordFile(imageRef)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var rec kubeletv1beta1.ImagePulledRecord
	if err := json.Unmarshal(data, &rec); err != nil || rec.ImageRef != imageRef {
		return nil, true, fmt.Errorf("unreadable image pull record for %s: %v", imageRef, err)
	}
	return &rec, true, nil
}

// mustPull says whether a pod with these pull secrets must pull a present
// image again to use it: the policy asks for proof, and neither the node
// nor one of the pod's secrets (by identity or by content) pulled it. Any
// doubt (a record that cannot be read) asks for the pull.
func (r *PullRecords) mustPull(policy VerifyPolicy, image, imageRef string, secrets []kubeletv1beta1.ImagePullSecret) bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	rec, exists, err := r.read(imageRef)
	r.mu.Unlock()
	if err != nil {
		return true
	}
	if !exists {
		_, statErr := os.Stat(filepath.Join(r.pulling, recordFile(image)))
		exists = statErr == nil
	}
	if !policy.mustVerify(image, exists) {
		return false
	}
	if rec == nil {
		return true
	}
	name, err := imageName(image)
	if err != nil {
		return true
	}
	creds := rec.CredentialMapping[name]
	if creds.NodePodsAccessible {
		return false
	}
	for _, mine := range secrets {
		for _, theirs := range creds.KubernetesSecrets {
			sameSecret := mine.UID == theirs.UID && mine.Namespace == theirs.Namespace && mine.Name == theirs.Name
			if sameSecret || (theirs.CredentialHash != "" && mine.CredentialHash == theirs.CredentialHash) {
				return false
			}
		}
	}
	return true
}

func writeRecord(dir, name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// The directory stays the node's alone: records name pods' secrets.
	return poddirs.WriteFileAtomic(filepath.Join(dir, name), data, 0o600)
}
