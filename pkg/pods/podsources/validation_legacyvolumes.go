package podsources

import (
	"maps"
	"net"
	"regexp"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The API server's checks of the in-tree network and cloud volume
// sources, at v1.37, with its field paths (two of which, gcePersistentDisk
// and cephFS, it names otherwise than the JSON). nodelet mounts none of
// them (admission refuses them, pkg/pods/podfields), but a pod the API
// server would refuse for them is refused here first, naming the field.

var (
	iqnFormat = regexp.MustCompile(`iqn\.\d{4}-\d{2}\.([[:alnum:]-.]+)(:[^,;*&$|\s]+)$`)
	euiFormat = regexp.MustCompile(`^eui.[[:alnum:]]{16}$`)
	naaFormat = regexp.MustCompile(`^naa.[[:alnum:]]{32}$`)
)

// legacyVolumeChecks are the checks of each legacy source, by JSON name.
func legacyVolumeChecks(s *v1.VolumeSource) map[string]func(*field.Path) field.ErrorList {
	return map[string]func(*field.Path) field.ErrorList{
		"gcePersistentDisk": func(p *field.Path) field.ErrorList {
			// Upstream names it persistentDisk.
			pd, p := s.GCEPersistentDisk, p.Child("persistentDisk")
			errs := required(pd.PDName, p.Child("pdName"))
			return append(errs, partition(pd.Partition, p.Child("partition"))...)
		},
		"awsElasticBlockStore": func(p *field.Path) field.ErrorList {
			pd, p := s.AWSElasticBlockStore, p.Child("awsElasticBlockStore")
			errs := required(pd.VolumeID, p.Child("volumeID"))
			return append(errs, partition(pd.Partition, p.Child("partition"))...)
		},
		"iscsi": func(p *field.Path) field.ErrorList { return validateISCSI(s.ISCSI, p) },
		"glusterfs": func(p *field.Path) field.ErrorList {
			g, p := s.Glusterfs, p.Child("glusterfs")
			return append(required(g.EndpointsName, p.Child("endpoints")), required(g.Path, p.Child("path"))...)
		},
		"flocker": func(p *field.Path) field.ErrorList {
			f, p := s.Flocker, p.Child("flocker")
			var errs field.ErrorList
			if f.DatasetName == "" && f.DatasetUUID == "" {
				errs = append(errs, field.Required(p, "one of datasetName and datasetUUID is required"))
			}
			if f.DatasetName != "" && f.DatasetUUID != "" {
				errs = append(errs, field.Invalid(p, "resource", "datasetName and datasetUUID can not be specified simultaneously"))
			}
			if strings.Contains(f.DatasetName, "/") {
				errs = append(errs, field.Invalid(p.Child("datasetName"), f.DatasetName, "must not contain '/'"))
			}
			return errs
		},
		"rbd": func(p *field.Path) field.ErrorList {
			r, p := s.RBD, p.Child("rbd")
			var errs field.ErrorList
			if len(r.CephMonitors) == 0 {
				errs = append(errs, field.Required(p.Child("monitors"), ""))
			}
			return append(errs, required(r.RBDImage, p.Child("image"))...)
		},
		"cinder": func(p *field.Path) field.ErrorList {
			c, p := s.Cinder, p.Child("cinder")
			errs := required(c.VolumeID, p.Child("volumeID"))
			if c.SecretRef != nil {
				errs = append(errs, required(c.SecretRef.Name, p.Child("secretRef", "name"))...)
			}
			return errs
		},
		"cephFS": func(p *field.Path) field.ErrorList {
			// Upstream names it cephfs.
			if len(s.CephFS.Monitors) == 0 {
				return field.ErrorList{field.Required(p.Child("cephfs", "monitors"), "")}
			}
			return nil
		},
		"quobyte":    func(p *field.Path) field.ErrorList { return validateQuobyte(s.Quobyte, p.Child("quobyte")) },
		"fc":         func(p *field.Path) field.ErrorList { return validateFC(s.FC, p.Child("fc")) },
		"flexVolume": func(p *field.Path) field.ErrorList { return validateFlex(s.FlexVolume, p.Child("flexVolume")) },
		"azureFile": func(p *field.Path) field.ErrorList {
			a, p := s.AzureFile, p.Child("azureFile")
			return append(required(a.SecretName, p.Child("secretName")), required(a.ShareName, p.Child("shareName"))...)
		},
		"vsphereVolume": func(p *field.Path) field.ErrorList {
			return required(s.VsphereVolume.VolumePath, p.Child("vsphereVolume", "volumePath"))
		},
		"photonPersistentDisk": func(p *field.Path) field.ErrorList {
			return required(s.PhotonPersistentDisk.PdID, p.Child("photonPersistentDisk", "pdID"))
		},
		"portworxVolume": func(p *field.Path) field.ErrorList {
			return required(s.PortworxVolume.VolumeID, p.Child("portworxVolume", "volumeID"))
		},
		"azureDisk": func(p *field.Path) field.ErrorList { return validateAzureDisk(s.AzureDisk, p.Child("azureDisk")) },
		"storageos": func(p *field.Path) field.ErrorList {
			o, p := s.StorageOS, p.Child("storageos")
			var errs field.ErrorList
			if o.VolumeName == "" {
				errs = append(errs, field.Required(p.Child("volumeName"), ""))
			} else {
				errs = append(errs, dns1123Label(o.VolumeName, p.Child("volumeName"))...)
			}
			if o.VolumeNamespace != "" {
				errs = append(errs, dns1123Label(o.VolumeNamespace, p.Child("volumeNamespace"))...)
			}
			if o.SecretRef != nil {
				errs = append(errs, required(o.SecretRef.Name, p.Child("secretRef", "name"))...)
			}
			return errs
		},
		"scaleIO": func(p *field.Path) field.ErrorList {
			o, p := s.ScaleIO, p.Child("scaleIO")
			errs := required(o.Gateway, p.Child("gateway"))
			errs = append(errs, required(o.System, p.Child("system"))...)
			return append(errs, required(o.VolumeName, p.Child("volumeName"))...)
		},
	}
}

func required(v string, p *field.Path) field.ErrorList {
	if v == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	return nil
}

func partition(n int32, p *field.Path) field.ErrorList {
	if n < 0 || n > 255 {
		return field.ErrorList{field.Invalid(p, n, validation.InclusiveRangeError(1, 255))}
	}
	return nil
}

// iscsiName checks an IQN or initiator name: iqn, eui or naa, in its
// format.
func iscsiName(v string, p *field.Path, prefixMsg string) field.ErrorList {
	switch {
	case !strings.HasPrefix(v, "iqn") && !strings.HasPrefix(v, "eui") && !strings.HasPrefix(v, "naa"):
		return field.ErrorList{field.Invalid(p, v, prefixMsg)}
	case strings.HasPrefix(v, "iqn") && !iqnFormat.MatchString(v),
		strings.HasPrefix(v, "eui") && !euiFormat.MatchString(v),
		strings.HasPrefix(v, "naa") && !naaFormat.MatchString(v):
		return field.ErrorList{field.Invalid(p, v, "must be valid format")}
	}
	return nil
}

func validateISCSI(i *v1.ISCSIVolumeSource, vp *field.Path) field.ErrorList {
	p := vp.Child("iscsi")
	errs := required(i.TargetPortal, p.Child("targetPortal"))
	if i.IQN == "" {
		errs = append(errs, field.Required(p.Child("iqn"), ""))
	} else {
		errs = append(errs, iscsiName(i.IQN, p.Child("iqn"), "must be valid format starting with iqn, eui, or naa")...)
	}
	if i.Lun < 0 || i.Lun > 255 {
		errs = append(errs, field.Invalid(p.Child("lun"), i.Lun, validation.InclusiveRangeError(0, 255)))
	}
	if (i.DiscoveryCHAPAuth || i.SessionCHAPAuth) && i.SecretRef == nil {
		errs = append(errs, field.Required(p.Child("secretRef"), ""))
	}
	if i.InitiatorName != nil {
		n, ip := *i.InitiatorName, p.Child("initiatorname")
		if !strings.HasPrefix(n, "iqn") && !strings.HasPrefix(n, "eui") && !strings.HasPrefix(n, "naa") {
			errs = append(errs, field.Invalid(ip, n, "must be valid format starting with iqn, eui, or naa"))
		} else {
			errs = append(errs, iscsiName(n, ip, "")...)
		}
	}
	return errs
}

// iscsiNameLength: with an initiator name, the volume's name and the
// target portal make the initiator's interface name, which is short.
func iscsiNameLength(i *v1.ISCSIVolumeSource, volName string) func(*field.Path) field.ErrorList {
	return func(p *field.Path) field.ErrorList {
		if i.InitiatorName != nil && len(volName+":"+i.TargetPortal) > 64 {
			return field.ErrorList{field.Invalid(p.Child("name"), volName,
				"Total length of <volume name>:<iscsi.targetPortal> must be under 64 characters if iscsi.initiatorName is specified.")}
		}
		return nil
	}
}

func validateQuobyte(q *v1.QuobyteVolumeSource, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case q.Registry == "":
		errs = append(errs, field.Required(p.Child("registry"), "must be a host:port pair or multiple pairs separated by commas"))
	case len(q.Tenant) >= 65:
		errs = append(errs, field.Required(p.Child("tenant"), "must be a UUID and may not exceed a length of 64 characters"))
	default:
		for _, pair := range strings.Split(q.Registry, ",") {
			if _, _, err := net.SplitHostPort(pair); err != nil {
				errs = append(errs, field.Invalid(p.Child("registry"), q.Registry, "must be a host:port pair or multiple pairs separated by commas"))
			}
		}
	}
	return append(errs, required(q.Volume, p.Child("volume"))...)
}

func validateFC(fc *v1.FCVolumeSource, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(fc.TargetWWNs) < 1 && len(fc.WWIDs) < 1 {
		errs = append(errs, field.Required(p.Child("targetWWNs"), "must specify either targetWWNs or wwids, but not both"))
	}
	if len(fc.TargetWWNs) != 0 && len(fc.WWIDs) != 0 {
		errs = append(errs, field.Invalid(p.Child("targetWWNs"), fc.TargetWWNs, "targetWWNs and wwids can not be specified simultaneously"))
	}
	if len(fc.TargetWWNs) != 0 {
		if fc.Lun == nil {
			errs = append(errs, field.Required(p.Child("lun"), "lun is required if targetWWNs is specified"))
		} else if *fc.Lun < 0 || *fc.Lun > 255 {
			errs = append(errs, field.Invalid(p.Child("lun"), fc.Lun, validation.InclusiveRangeError(0, 255)))
		}
	}
	return errs
}

func validateFlex(f *v1.FlexVolumeSource, p *field.Path) field.ErrorList {
	errs := required(f.Driver, p.Child("driver"))
	for _, k := range slices.Sorted(maps.Keys(f.Options)) {
		ns, _, _ := strings.Cut(k, "/")
		if n := "." + strings.ToLower(ns); strings.HasSuffix(n, ".kubernetes.io") || strings.HasSuffix(n, ".k8s.io") {
			errs = append(errs, field.Invalid(p.Child("options").Key(k), k, "kubernetes.io and k8s.io namespaces are reserved"))
		}
	}
	return errs
}

func validateAzureDisk(a *v1.AzureDiskVolumeSource, p *field.Path) field.ErrorList {
	errs := required(a.DiskName, p.Child("diskName"))
	errs = append(errs, required(a.DataDiskURI, p.Child("diskURI"))...)
	if c := a.CachingMode; c != nil && *c != v1.AzureDataDiskCachingNone && *c != v1.AzureDataDiskCachingReadOnly && *c != v1.AzureDataDiskCachingReadWrite {
		errs = append(errs, field.NotSupported(p.Child("cachingMode"), *c, []string{"None", "ReadOnly", "ReadWrite"}))
	}
	if k := a.Kind; k != nil && *k != v1.AzureSharedBlobDisk && *k != v1.AzureDedicatedBlobDisk && *k != v1.AzureManagedDisk {
		errs = append(errs, field.NotSupported(p.Child("kind"), *k, []string{"Dedicated", "Managed", "Shared"}))
	}
	if k := a.Kind; k != nil && *k == v1.AzureManagedDisk && !strings.HasPrefix(a.DataDiskURI, "/subscriptions/") {
		errs = append(errs, field.NotSupported(p.Child("diskURI"), a.DataDiskURI,
			[]string{"/subscriptions/{sub-id}/resourcegroups/{group-name}/providers/microsoft.compute/disks/{disk-id}"}))
	}
	if k := a.Kind; k != nil && *k != v1.AzureManagedDisk && !strings.HasPrefix(a.DataDiskURI, "https://") {
		errs = append(errs, field.NotSupported(p.Child("diskURI"), a.DataDiskURI,
			[]string{"https://{account-name}.blob.core.windows.net/{container-name}/{disk-name}.vhd"}))
	}
	return errs
}
