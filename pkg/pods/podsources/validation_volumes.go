package podsources

import (
	"path"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The API server's checks of the volumes nodelet writes files into
// (configMap, secret, downwardAPI, projected), at v1.37, with its field
// paths and messages: an item's path must stay beneath the volume (no
// absolute path, no ".." element), as the writer also insists.

const fileModeErrorMsg = "must be a number between 0 and 0777 (octal), both inclusive"

func validateDataVolume(v *v1.Volume, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch s := v.VolumeSource; {
	case s.ConfigMap != nil:
		p := p.Child("configMap")
		if s.ConfigMap.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		}
		errs = append(errs, fileMode(s.ConfigMap.DefaultMode, p.Child("defaultMode"))...)
		errs = append(errs, userID(s.ConfigMap.DefaultUser, p.Child("defaultUser"))...)
		for i := range s.ConfigMap.Items {
			errs = append(errs, validateKeyToPath(&s.ConfigMap.Items[i], p.Child("items").Index(i))...)
		}
	case s.Secret != nil:
		p := p.Child("secret")
		if s.Secret.SecretName == "" {
			errs = append(errs, field.Required(p.Child("secretName"), ""))
		}
		errs = append(errs, fileMode(s.Secret.DefaultMode, p.Child("defaultMode"))...)
		errs = append(errs, userID(s.Secret.DefaultUser, p.Child("defaultUser"))...)
		for i := range s.Secret.Items {
			errs = append(errs, validateKeyToPath(&s.Secret.Items[i], p.Child("items").Index(i))...)
		}
	case s.DownwardAPI != nil:
		p := p.Child("downwardAPI")
		errs = append(errs, fileMode(s.DownwardAPI.DefaultMode, p.Child("defaultMode"))...)
		errs = append(errs, userID(s.DownwardAPI.DefaultUser, p.Child("defaultUser"))...)
		for i := range s.DownwardAPI.Items {
			// Upstream names the volume, not the item, for these.
			errs = append(errs, validateDownwardAPIFile(&s.DownwardAPI.Items[i], p)...)
		}
	case s.Projected != nil:
		errs = append(errs, validateProjected(s.Projected, p.Child("projected"))...)
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
			tp := sp.Child("serviceAccountToken")
			switch exp := s.ExpirationSeconds; {
			case exp == nil:
				errs = append(errs, field.Required(tp.Child("expirationSeconds"), ""))
			case *exp < 10*60:
				errs = append(errs, field.Invalid(tp.Child("expirationSeconds"), *exp, "may not specify a duration less than 10 minutes"))
			case *exp > 1<<32:
				errs = append(errs, field.Invalid(tp.Child("expirationSeconds"), *exp, "may not specify a duration larger than 2^32 seconds"))
			}
			if s.Path == "" {
				errs = append(errs, field.Required(p.Child("path"), ""))
			} else {
				errs = append(errs, localNonReservedPath(s.Path, p.Child("path"))...)
			}
			errs = append(errs, userID(s.User, tp.Child("user"))...)
		}
		if s := src.ClusterTrustBundle; s != nil {
			bp := sp.Child("clusterTrustBundle")
			if s.Path == "" {
				errs = append(errs, field.Required(bp.Child("path"), ""))
			}
			errs = append(errs, userID(s.User, bp.Child("user"))...)
			errs = append(errs, localNonReservedPath(s.Path, bp.Child("path"))...)
			claim(s.Path, s.Path)
		}
		if s := src.PodCertificate; s != nil {
			cp := sp.Child("podCertificate")
			for _, f := range []struct{ name, path string }{
				{"credentialBundlePath", s.CredentialBundlePath}, {"keyPath", s.KeyPath}, {"certificateChainPath", s.CertificateChainPath},
			} {
				if f.path != "" {
					errs = append(errs, localNonReservedPath(f.path, cp.Child(f.name))...)
					claim(f.path, f.path)
				}
			}
		}
		if sourceKinds(&src) > 1 {
			errs = append(errs, field.Forbidden(sp, "may not specify more than 1 volume type per source"))
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
	errs = append(errs, userID(kp.User, p.Child("user"))...)
	return errs
}

func validateDownwardAPIFile(f *v1.DownwardAPIVolumeFile, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if f.Path == "" {
		errs = append(errs, field.Required(p.Child("path"), ""))
	}
	errs = append(errs, localNonReservedPath(f.Path, p.Child("path"))...)
	switch {
	case f.FieldRef != nil && f.ResourceFieldRef != nil:
		errs = append(errs, field.Invalid(p, "resource", "fieldRef and resourceFieldRef can not be specified simultaneously"))
	case f.FieldRef == nil && f.ResourceFieldRef == nil:
		errs = append(errs, field.Required(p, "one of fieldRef and resourceFieldRef is required"))
	}
	errs = append(errs, fileMode(f.Mode, p.Child("mode"))...)
	errs = append(errs, userID(f.User, p.Child("user"))...)
	return errs
}

// localNonReservedPath is a path beneath a volume that cannot be one of
// the writer's own ("..data", "..<timestamp>").
func localNonReservedPath(target string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if path.IsAbs(target) {
		errs = append(errs, field.Invalid(p, target, "must be a relative path"))
	}
	for _, part := range strings.Split(filepath.ToSlash(target), "/") {
		if part == ".." {
			errs = append(errs, field.Invalid(p, target, "must not contain '..'"))
			break
		}
	}
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
