package podsources

import (
	"fmt"
	"maps"
	"path"
	"reflect"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

// The volume checks of the API server's pod validation, at v1.37, with its
// field paths and messages: one source per volume; for the volumes
// nodelet writes files into (configMap, secret, downwardAPI, projected) an
// item's path stays beneath the volume (no absolute path, no ".."
// element), as the writer also insists.

const fileModeErrorMsg = "must be a number between 0 and 0777 (octal), both inclusive"

// validateVolumes checks the volumes and returns those that passed, by
// name: a mount of a volume that failed is not found.
func validateVolumes(vols []v1.Volume, podName string, path *field.Path) (map[string]v1.VolumeSource, field.ErrorList) {
	var errs field.ErrorList
	created := map[string]bool{} // the PVCs the pod's ephemeral volumes create
	for _, v := range vols {
		if v.Ephemeral != nil && podName != "" {
			created[podName+"-"+v.Name] = true
		}
	}
	ok := map[string]v1.VolumeSource{}
	names := map[string]bool{}
	for i, v := range vols {
		p := path.Index(i)
		el := validateVolumeSource(&v.VolumeSource, v.Name, podName, p)
		if v.Name == "" {
			el = append(el, field.Required(p.Child("name"), ""))
		} else {
			el = append(el, dns1123Label(v.Name, p.Child("name"))...)
		}
		if names[v.Name] {
			el = append(el, field.Duplicate(p.Child("name"), v.Name))
		}
		if len(el) == 0 {
			names[v.Name] = true
			ok[v.Name] = v.VolumeSource
		} else {
			errs = append(errs, el...)
		}
		if v.PersistentVolumeClaim != nil && created[v.PersistentVolumeClaim.ClaimName] {
			errs = append(errs, field.Invalid(p.Child("persistentVolumeClaim", "claimName"), v.PersistentVolumeClaim.ClaimName,
				"must not reference a PVC that gets created for an ephemeral volume"))
		}
	}
	return ok, errs
}

// volumeSource is one of a volume's sources: its JSON name, whether it is
// set, its checks when it is the volume's source, and the checks upstream
// makes of it even when another source came first (nil: none).
type volumeSource struct {
	name   string
	set    bool
	check  func(*field.Path) field.ErrorList
	always func(*field.Path) field.ErrorList
}

func validateVolumeSource(s *v1.VolumeSource, volName, podName string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if e := s.EmptyDir; e != nil {
		if e.SizeLimit != nil && e.SizeLimit.Cmp(resource.Quantity{}) < 0 {
			errs = append(errs, field.Forbidden(path.Child("emptyDir", "sizeLimit"), "SizeLimit field must be a valid resource quantity"))
		}
		if e.Mode != nil && (*e.Mode > 0o1777 || *e.Mode < 0) {
			errs = append(errs, field.Invalid(path.Child("emptyDir", "mode"), *e.Mode, "must be a number between 0 and 01777 (octal), both inclusive"))
		}
	}
	n := 0
	if s.EmptyDir != nil {
		n++
	}
	for _, src := range volumeSources(s, volName, podName) {
		if !src.set {
			continue
		}
		if n > 0 {
			errs = append(errs, field.Forbidden(path.Child(src.name), "may not specify more than 1 volume type"))
		} else {
			n++
			errs = append(errs, src.check(path)...)
		}
		if src.always != nil {
			errs = append(errs, src.always(path)...)
		}
	}
	if n == 0 {
		errs = append(errs, field.Required(path, "must specify a volume type"))
	}
	return errs
}

// volumeSources lists the sources after emptyDir in the API server's order.
func volumeSources(s *v1.VolumeSource, volName, podName string) []volumeSource {
	legacy := legacyVolumeChecks(s)
	return []volumeSource{
		{"hostPath", s.HostPath != nil, func(p *field.Path) field.ErrorList { return validateHostPath(s.HostPath, p.Child("hostPath")) }, nil},
		{"gitRepo", s.GitRepo != nil, func(p *field.Path) field.ErrorList {
			return append(required(s.GitRepo.Repository, p.Child("gitRepo", "repository")), localDescendingPath(s.GitRepo.Directory, p.Child("gitRepo", "directory"))...)
		}, nil},
		{"gcePersistentDisk", s.GCEPersistentDisk != nil, legacy["gcePersistentDisk"], nil},
		{"awsElasticBlockStore", s.AWSElasticBlockStore != nil, legacy["awsElasticBlockStore"], nil},
		{"secret", s.Secret != nil, func(p *field.Path) field.ErrorList {
			p = p.Child("secret")
			return append(required(s.Secret.SecretName, p.Child("secretName")), validateItems(s.Secret.DefaultMode, s.Secret.DefaultUser, s.Secret.Items, p)...)
		}, nil},
		{"nfs", s.NFS != nil, func(p *field.Path) field.ErrorList {
			p = p.Child("nfs")
			var errs field.ErrorList
			if s.NFS.Server == "" {
				errs = append(errs, field.Required(p.Child("server"), ""))
			}
			if s.NFS.Path == "" {
				errs = append(errs, field.Required(p.Child("path"), ""))
			}
			if !path.IsAbs(s.NFS.Path) {
				errs = append(errs, field.Invalid(p.Child("path"), s.NFS.Path, "must be an absolute path"))
			}
			return errs
		}, nil},
		{"iscsi", s.ISCSI != nil, legacy["iscsi"], iscsiNameLength(s.ISCSI, volName)},
		{"glusterfs", s.Glusterfs != nil, legacy["glusterfs"], nil},
		{"flocker", s.Flocker != nil, legacy["flocker"], nil},
		{"persistentVolumeClaim", s.PersistentVolumeClaim != nil, func(p *field.Path) field.ErrorList {
			return required(s.PersistentVolumeClaim.ClaimName, p.Child("persistentVolumeClaim", "claimName"))
		}, nil},
		{"rbd", s.RBD != nil, legacy["rbd"], nil},
		{"cinder", s.Cinder != nil, legacy["cinder"], nil},
		{"cephFS", s.CephFS != nil, legacy["cephFS"], nil},
		{"quobyte", s.Quobyte != nil, legacy["quobyte"], nil},
		// Upstream's message misspells it.
		{"downwarAPI", s.DownwardAPI != nil, func(p *field.Path) field.ErrorList {
			d := s.DownwardAPI
			p = p.Child("downwardAPI")
			errs := fileMode(d.DefaultMode, p.Child("defaultMode"))
			errs = append(errs, userID(d.DefaultUser, p.Child("defaultUser"))...)
			for i := range d.Items {
				// Upstream names the volume, not the item, for these.
				errs = append(errs, validateDownwardAPIFile(&d.Items[i], p)...)
			}
			return errs
		}, nil},
		{"fc", s.FC != nil, legacy["fc"], nil},
		{"flexVolume", s.FlexVolume != nil, legacy["flexVolume"], nil},
		{"configMap", s.ConfigMap != nil, func(p *field.Path) field.ErrorList {
			p = p.Child("configMap")
			return append(required(s.ConfigMap.Name, p.Child("name")), validateItems(s.ConfigMap.DefaultMode, s.ConfigMap.DefaultUser, s.ConfigMap.Items, p)...)
		}, nil},
		{"azureFile", s.AzureFile != nil, legacy["azureFile"], nil},
		{"vsphereVolume", s.VsphereVolume != nil, legacy["vsphereVolume"], nil},
		{"photonPersistentDisk", s.PhotonPersistentDisk != nil, legacy["photonPersistentDisk"], nil},
		{"portworxVolume", s.PortworxVolume != nil, legacy["portworxVolume"], nil},
		{"azureDisk", s.AzureDisk != nil, legacy["azureDisk"], nil},
		{"storageos", s.StorageOS != nil, legacy["storageos"], nil},
		{"projected", s.Projected != nil, func(p *field.Path) field.ErrorList { return validateProjected(s.Projected, p.Child("projected")) }, nil},
		{"scaleIO", s.ScaleIO != nil, legacy["scaleIO"], nil},
		{"csi", s.CSI != nil, func(p *field.Path) field.ErrorList { return validateCSI(s.CSI, p.Child("csi")) }, nil},
		{"ephemeral", s.Ephemeral != nil, func(p *field.Path) field.ErrorList {
			errs := validateEphemeral(s.Ephemeral, p.Child("ephemeral"))
			if podName != "" && volName != "" {
				pvc := podName + "-" + volName
				for _, msg := range apivalidation.NameIsDNSSubdomain(pvc, false) {
					errs = append(errs, field.Invalid(p.Child("name"), volName, fmt.Sprintf("PVC name %q: %v", pvc, msg)))
				}
			}
			return errs
		}, nil},
		{"image", s.Image != nil, func(p *field.Path) field.ErrorList {
			return append(required(s.Image.Reference, p.Child("image", "reference")), enum(string(s.Image.PullPolicy), p.Child("image", "pullPolicy"), "Always", "IfNotPresent", "Never")...)
		}, nil},
	}
}

var hostPathTypes = []string{"", "BlockDevice", "CharDevice", "Directory", "DirectoryOrCreate", "File", "FileOrCreate", "Socket"}

// validateHostPath: a path without "..", of a known type. A relative path
// passes here, as at the API server; the volume manager refuses it when
// it sets the volume up.
func validateHostPath(h *v1.HostPathVolumeSource, p *field.Path) field.ErrorList {
	if h.Path == "" {
		return field.ErrorList{field.Required(p.Child("path"), "")}
	}
	var errs field.ErrorList
	if hasBackstep(h.Path) {
		errs = append(errs, field.Invalid(p.Child("path"), h.Path, "must not contain '..'"))
	}
	if h.Type != nil && !slices.Contains(hostPathTypes, string(*h.Type)) {
		errs = append(errs, field.NotSupported(p.Child("type"), h.Type, hostPathTypes))
	}
	return errs
}

func validateItems(defaultMode *int32, defaultUser *int64, items []v1.KeyToPath, p *field.Path) field.ErrorList {
	errs := fileMode(defaultMode, p.Child("defaultMode"))
	errs = append(errs, userID(defaultUser, p.Child("defaultUser"))...)
	for i := range items {
		errs = append(errs, validateKeyToPath(&items[i], p.Child("items").Index(i))...)
	}
	return errs
}

func validateCSI(c *v1.CSIVolumeSource, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch d := c.Driver; {
	case d == "":
		errs = append(errs, field.Required(p.Child("driver"), ""))
	default:
		if len(d) > 63 {
			errs = append(errs, field.TooLong(p.Child("driver"), "", 63))
		}
		for _, msg := range validation.IsDNS1123Subdomain(strings.ToLower(d)) {
			errs = append(errs, field.Invalid(p.Child("driver"), d, msg))
		}
	}
	if r := c.NodePublishSecretRef; r != nil {
		if r.Name == "" {
			errs = append(errs, field.Required(p.Child("nodePublishSecretRef", "name"), ""))
		} else {
			for _, msg := range apivalidation.NameIsDNSSubdomain(r.Name, false) {
				errs = append(errs, field.Invalid(p.Child("name"), r.Name, msg))
			}
		}
	}
	return errs
}

var accessModes = []string{"ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"}

// validateEphemeral checks the claim template's metadata and the parts
// of its spec that need no API lookup.
func validateEphemeral(e *v1.EphemeralVolumeSource, p *field.Path) field.ErrorList {
	t := e.VolumeClaimTemplate
	if t == nil {
		return field.ErrorList{field.Required(p.Child("volumeClaimTemplate"), "")}
	}
	p = p.Child("volumeClaimTemplate")
	mp := p.Child("metadata")
	errs := apivalidation.ValidateAnnotations(t.Annotations, mp.Child("annotations"))
	errs = append(errs, metavalidation.ValidateLabels(t.Labels, mp.Child("labels"))...)
	// A claim template's metadata is its labels and annotations only.
	meta := reflect.ValueOf(t.ObjectMeta)
	for i := 0; i < meta.NumField(); i++ {
		f := meta.Type().Field(i)
		if f.Name != "Labels" && f.Name != "Annotations" && !meta.Field(i).IsZero() {
			errs = append(errs, field.Forbidden(mp.Child(strings.ToLower(f.Name[:1])+f.Name[1:]), "cannot be set"))
		}
	}
	sp, s := p.Child("spec"), &t.Spec
	if len(s.AccessModes) == 0 {
		errs = append(errs, field.Required(sp.Child("accessModes"), "at least 1 access mode is required"))
	}
	if s.Selector != nil {
		errs = append(errs, metavalidation.ValidateLabelSelector(s.Selector, metavalidation.LabelSelectorValidationOptions{}, sp.Child("selector"))...)
	}
	rwop, other := false, false
	for _, m := range s.AccessModes {
		if !slices.Contains(accessModes, string(m)) {
			errs = append(errs, field.NotSupported(sp.Child("accessModes"), m, accessModes))
		} else if m == v1.ReadWriteOncePod {
			rwop = true
		} else {
			other = true
		}
	}
	if rwop && other {
		errs = append(errs, field.Forbidden(sp.Child("accessModes"), "may not use ReadWriteOncePod with other access modes"))
	}
	rp := sp.Child("resources").Key(string(v1.ResourceStorage))
	switch q, ok := s.Resources.Requests[v1.ResourceStorage]; {
	case !ok:
		errs = append(errs, field.Required(rp, ""))
	case q.Cmp(resource.Quantity{}) <= 0:
		errs = append(errs, field.Invalid(rp, q.String(), "must be greater than zero"))
	}
	if c := s.StorageClassName; c != nil && *c != "" {
		for _, msg := range apivalidation.NameIsDNSSubdomain(*c, false) {
			errs = append(errs, field.Invalid(sp.Child("storageClassName"), *c, msg))
		}
	}
	if m := s.VolumeMode; m != nil && *m != v1.PersistentVolumeBlock && *m != v1.PersistentVolumeFilesystem {
		errs = append(errs, field.NotSupported(sp.Child("volumeMode"), *m, []string{"Block", "Filesystem"}))
	}
	return append(errs, validateDataSources(s, sp)...)
}

// validateDataSources: a claim's data source and data source reference
// each name a kind and an object (a PVC where no API group is given),
// and agree where both are set.
func validateDataSources(s *v1.PersistentVolumeClaimSpec, sp *field.Path) field.ErrorList {
	var errs field.ErrorList
	ref := func(group *string, kind, name string, p *field.Path) {
		if name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		}
		if kind == "" {
			errs = append(errs, field.Required(p.Child("kind"), ""))
		}
		g := ptr.Deref(group, "")
		if g == "" && kind != "PersistentVolumeClaim" {
			errs = append(errs, field.Invalid(p, kind, "must be 'PersistentVolumeClaim' when referencing the default apiGroup"))
		}
		for _, msg := range validation.IsDNS1123Subdomain(g) {
			if g != "" {
				errs = append(errs, field.Invalid(p.Child("apiGroup"), g, msg))
			}
		}
	}
	if d := s.DataSource; d != nil {
		ref(d.APIGroup, d.Kind, d.Name, sp.Child("dataSource"))
	}
	if d := s.DataSourceRef; d != nil {
		ref(d.APIGroup, d.Kind, d.Name, sp.Child("dataSourceRef"))
		if ns := ptr.Deref(d.Namespace, ""); ns != "" {
			for _, msg := range apivalidation.ValidateNamespaceName(ns, false) {
				errs = append(errs, field.Invalid(sp.Child("dataSourceRef", "namespace"), ns, msg))
			}
		}
	}
	switch d, r := s.DataSource, s.DataSourceRef; {
	case r != nil && ptr.Deref(r.Namespace, "") != "":
		if d != nil {
			errs = append(errs, field.Invalid(sp, sp.Child("dataSource"), "may not be specified when dataSourceRef.namespace is specified"))
		}
	case d != nil && r != nil:
		if ptr.Deref(d.APIGroup, "") != ptr.Deref(r.APIGroup, "") || d.Kind != r.Kind || d.Name != r.Name {
			errs = append(errs, field.Invalid(sp, sp.Child("dataSource"), "must match dataSourceRef"))
		}
	}
	if c := ptr.Deref(s.VolumeAttributesClassName, ""); c != "" {
		for _, msg := range apivalidation.NameIsDNSSubdomain(c, false) {
			errs = append(errs, field.Invalid(sp.Child("volumeAttributesClassName"), c, msg))
		}
	}
	return errs
}

func validateProjected(pr *v1.ProjectedVolumeSource, p *field.Path) field.ErrorList {
	errs := fileMode(pr.DefaultMode, p.Child("defaultMode"))
	errs = append(errs, userID(pr.DefaultUser, p.Child("defaultUser"))...)
	paths := map[string]bool{}
	claim := func(item string, value string) {
		if item == "" {
			return
		}
		if paths[item] {
			errs = append(errs, field.Invalid(p, value, "conflicting duplicate paths"))
		}
		paths[item] = true
	}
	for i, src := range pr.Sources {
		sp := p.Child("sources").Index(i)
		if s := src.Secret; s != nil {
			if s.Name == "" {
				errs = append(errs, field.Required(sp.Child("secret", "name"), ""))
			}
			for j := range s.Items {
				errs = append(errs, validateKeyToPath(&s.Items[j], sp.Child("secret", "items").Index(j))...)
				claim(s.Items[j].Path, s.Name)
			}
		}
		if s := src.ConfigMap; s != nil {
			if s.Name == "" {
				errs = append(errs, field.Required(sp.Child("configMap", "name"), ""))
			}
			for j := range s.Items {
				errs = append(errs, validateKeyToPath(&s.Items[j], sp.Child("configMap", "items").Index(j))...)
				claim(s.Items[j].Path, s.Name)
			}
		}
		if s := src.DownwardAPI; s != nil {
			for j := range s.Items {
				errs = append(errs, validateDownwardAPIFile(&s.Items[j], sp.Child("downwardAPI"))...)
				claim(s.Items[j].Path, s.Items[j].Path)
			}
		}
		if s := src.ServiceAccountToken; s != nil {
			errs = append(errs, validateTokenProjection(s, sp.Child("serviceAccountToken"), p)...)
		}
		if s := src.ClusterTrustBundle; s != nil {
			errs = append(errs, validateTrustBundleProjection(s, sp.Child("clusterTrustBundle"))...)
			claim(s.Path, s.Path)
		}
		if s := src.PodCertificate; s != nil {
			cp := sp.Child("podCertificate")
			errs = append(errs, validatePodCertificate(s, cp)...)
			n := 0
			for _, f := range []struct{ name, path string }{
				{"credentialBundlePath", s.CredentialBundlePath}, {"keyPath", s.KeyPath}, {"certificateChainPath", s.CertificateChainPath},
			} {
				if f.path != "" {
					n++
					errs = append(errs, localNonReservedPath(f.path, cp.Child(f.name))...)
					claim(f.path, f.path)
				}
			}
			if n == 0 {
				errs = append(errs, field.Required(cp, "specify at least one of credentialBundlePath, keyPath, and certificateChainPath"))
			}
		}
		if sourceKinds(&src) > 1 {
			errs = append(errs, field.Forbidden(sp, "may not specify more than 1 volume type per source"))
		}
	}
	return errs
}

// validateTokenProjection: a token lives 10 minutes to 2^32 seconds, at
// a path beneath the volume (upstream names the volume's path for it).
func validateTokenProjection(s *v1.ServiceAccountTokenProjection, tp, volume *field.Path) field.ErrorList {
	var errs field.ErrorList
	if exp := s.ExpirationSeconds; exp == nil {
		errs = append(errs, field.Required(tp.Child("expirationSeconds"), ""))
	} else {
		if *exp < 10*60 {
			errs = append(errs, field.Invalid(tp.Child("expirationSeconds"), *exp, "may not specify a duration less than 10 minutes"))
		}
		if *exp > 1<<32 {
			errs = append(errs, field.Invalid(tp.Child("expirationSeconds"), *exp, "may not specify a duration larger than 2^32 seconds"))
		}
	}
	if s.Path == "" {
		errs = append(errs, field.Required(volume.Child("path"), ""))
	} else {
		errs = append(errs, localNonReservedPath(s.Path, volume.Child("path"))...)
	}
	return append(errs, userID(s.User, tp.Child("user"))...)
}

func validateTrustBundleProjection(s *v1.ClusterTrustBundleProjection, bp *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case s.Name != nil && s.SignerName != nil:
		errs = append(errs, field.Invalid(bp, s, "only one of name and signerName may be used"))
	case s.Name != nil:
		if *s.Name == "" {
			errs = append(errs, field.Required(bp.Child("name"), "must be a valid object name"))
		}
		for _, msg := range trustBundleNameProblems(*s.Name) {
			errs = append(errs, field.Invalid(bp.Child("name"), *s.Name, "not a valid clustertrustbundlename: "+msg))
		}
		if s.LabelSelector != nil {
			errs = append(errs, field.Invalid(bp.Child("labelSelector"), s.LabelSelector, "labelSelector must be unset if name is specified"))
		}
	case s.SignerName != nil:
		if *s.SignerName == "" {
			errs = append(errs, field.Required(bp.Child("signerName"), "must be a valid signer name"))
		}
		errs = append(errs, validateSignerName(bp.Child("signerName"), *s.SignerName)...)
		errs = append(errs, metavalidation.ValidateLabelSelector(s.LabelSelector, metavalidation.LabelSelectorValidationOptions{}, bp.Child("labelSelector"))...)
	default:
		errs = append(errs, field.Required(bp, "either name or signerName must be specified"))
	}
	if s.Path == "" {
		errs = append(errs, field.Required(bp.Child("path"), ""))
	}
	errs = append(errs, userID(s.User, bp.Child("user"))...)
	return append(errs, localNonReservedPath(s.Path, bp.Child("path"))...)
}

// trustBundleNameProblems: a bundle named "<signer, ':' for '/'>:<name>"
// belongs to that signer and is named with its prefix; one without a
// signer has no ':'.
func trustBundleNameProblems(name string) []string {
	signer := ""
	if i := strings.LastIndex(name, ":"); i >= 0 {
		signer = strings.ReplaceAll(name[:i], ":", "/")
	}
	if signer == "" {
		if strings.Contains(name, ":") {
			return []string{"ClusterTrustBundle without signer name must not have \":\" in its name"}
		}
		return apivalidation.NameIsDNSSubdomain(name, false)
	}
	prefix := strings.ReplaceAll(signer, "/", ":") + ":"
	if !strings.HasPrefix(name, prefix) {
		return []string{fmt.Sprintf("ClusterTrustBundle for signerName %s must be named with prefix %s", signer, prefix)}
	}
	return apivalidation.NameIsDNSSubdomain(strings.TrimPrefix(name, prefix), false)
}

// validateSignerName: "<domain of two labels or more>/<path>".
func validateSignerName(p *field.Path, name string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	segments := strings.Split(name, "/")
	if len(segments) != 2 {
		return field.ErrorList{field.Invalid(p, name, "must be a fully qualified domain and path of the form 'example.com/signer-name'")}
	}
	var errs field.ErrorList
	domain, rest := segments[0], segments[1]
	if len(domain) > validation.DNS1123SubdomainMaxLength {
		errs = append(errs, field.TooLong(p, "", validation.DNS1123SubdomainMaxLength))
	}
	labels := strings.Split(domain, ".")
	for _, l := range labels {
		if msgs := validation.IsDNS1123Label(l); len(msgs) > 0 {
			for _, msg := range msgs {
				errs = append(errs, field.Invalid(p, domain, fmt.Sprintf("validating label %q: %s", l, msg)))
			}
			break
		}
	}
	if len(labels) < 2 {
		errs = append(errs, field.Invalid(p, domain, "should be a domain with at least two segments separated by dots"))
	}
	for _, l := range strings.Split(rest, ".") {
		if msgs := validation.IsDNS1123Subdomain(l); len(msgs) > 0 {
			for _, msg := range msgs {
				errs = append(errs, field.Invalid(p, rest, fmt.Sprintf("validating label %q: %s", l, msg)))
			}
			break
		}
	}
	if max := 2*validation.DNS1123SubdomainMaxLength + validation.DNS1123LabelMaxLength + 2; len(name) > max {
		errs = append(errs, field.TooLong(p, "", max))
	}
	return errs
}

var podCertificateKeyTypes = []string{"RSA3072", "RSA4096", "ECDSAP256", "ECDSAP384", "ECDSAP521", "ED25519"}

// The longest lives a pod certificate may ask for: 91 days, or 24 hours
// from a kubernetes.io signer.
const (
	maxPodCertificateSeconds           = 91 * 24 * 60 * 60
	maxKubernetesPodCertificateSeconds = 24 * 60 * 60
)

func validatePodCertificate(s *v1.PodCertificateProjection, cp *field.Path) field.ErrorList {
	errs := validateSignerName(cp.Child("signerName"), s.SignerName)
	if s.UserAnnotations != nil {
		for _, k := range slices.Sorted(maps.Keys(s.UserAnnotations)) {
			errs = append(errs, validation.IsDomainPrefixedKey(cp.Child("userAnnotations"), strings.ToLower(k))...)
		}
		if err := apivalidation.ValidateAnnotationsSize(s.UserAnnotations); err != nil {
			errs = append(errs, field.TooLong(cp.Child("userAnnotations"), "", apivalidation.TotalAnnotationSizeLimitB))
		}
	}
	errs = append(errs, userID(s.User, cp.Child("user"))...)
	if !slices.Contains(podCertificateKeyTypes, s.KeyType) {
		errs = append(errs, field.NotSupported(cp.Child("keyType"), s.KeyType, podCertificateKeyTypes))
	}
	if m := s.MaxExpirationSeconds; m != nil {
		if *m < 3600 {
			errs = append(errs, field.Invalid(cp.Child("maxExpirationSeconds"), *m, "if provided, maxExpirationSeconds must be >= 3600"))
		}
		limit := maxPodCertificateSeconds
		if host, _, _ := strings.Cut(s.SignerName, "/"); host == "kubernetes.io" || strings.HasSuffix(host, ".kubernetes.io") {
			limit = maxKubernetesPodCertificateSeconds
		}
		if *m > int32(limit) {
			errs = append(errs, field.Invalid(cp.Child("maxExpirationSeconds"), *m, fmt.Sprintf("if provided, maxExpirationSeconds must be <= %d", limit)))
		}
	}
	return errs
}

func sourceKinds(s *v1.VolumeProjection) int {
	n := 0
	for _, set := range []bool{s.Secret != nil, s.ConfigMap != nil, s.DownwardAPI != nil, s.ServiceAccountToken != nil,
		s.ClusterTrustBundle != nil, s.PodCertificate != nil} {
		if set {
			n++
		}
	}
	return n
}

func validateKeyToPath(kp *v1.KeyToPath, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if kp.Key == "" {
		errs = append(errs, field.Required(p.Child("key"), ""))
	}
	if kp.Path == "" {
		errs = append(errs, field.Required(p.Child("path"), ""))
	}
	errs = append(errs, localNonReservedPath(kp.Path, p.Child("path"))...)
	errs = append(errs, fileMode(kp.Mode, p.Child("mode"))...)
	return append(errs, userID(kp.User, p.Child("user"))...)
}

func validateDownwardAPIFile(f *v1.DownwardAPIVolumeFile, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if f.Path == "" {
		errs = append(errs, field.Required(p.Child("path"), ""))
	}
	errs = append(errs, localNonReservedPath(f.Path, p.Child("path"))...)
	switch {
	case f.FieldRef != nil:
		errs = append(errs, validateFieldSelector(f.FieldRef, volumeFieldPaths, p.Child("fieldRef"))...)
		if f.ResourceFieldRef != nil {
			errs = append(errs, field.Invalid(p, "resource", "fieldRef and resourceFieldRef can not be specified simultaneously"))
		}
	case f.ResourceFieldRef != nil:
		errs = append(errs, validateResourceFieldSelector(f.ResourceFieldRef, true, p.Child("resourceFieldRef"))...)
	default:
		errs = append(errs, field.Required(p, "one of fieldRef and resourceFieldRef is required"))
	}
	errs = append(errs, fileMode(f.Mode, p.Child("mode"))...)
	return append(errs, userID(f.User, p.Child("user"))...)
}

// localDescendingPath: relative, without a ".." element.
func localDescendingPath(target string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if path.IsAbs(target) {
		errs = append(errs, field.Invalid(p, target, "must be a relative path"))
	}
	if hasBackstep(target) {
		errs = append(errs, field.Invalid(p, target, "must not contain '..'"))
	}
	return errs
}

// localNonReservedPath is a path beneath a volume that cannot be one of
// the writer's own ("..data", "..<timestamp>").
func localNonReservedPath(target string, p *field.Path) field.ErrorList {
	errs := localDescendingPath(target, p)
	if strings.HasPrefix(target, "..") && !strings.HasPrefix(target, "../") {
		errs = append(errs, field.Invalid(p, target, "must not start with '..'"))
	}
	return errs
}

func fileMode(mode *int32, p *field.Path) field.ErrorList {
	if mode != nil && (*mode > 0o777 || *mode < 0) {
		return field.ErrorList{field.Invalid(p, *mode, fileModeErrorMsg)}
	}
	return nil
}
