package kubelet

// orNone is v, or the null object when v is nil: optional dependencies
// are never nil inside the package.
func orNone[T comparable](v, none T) T {
	var unset T
	if v == unset {
		return none
	}
	return v
}
