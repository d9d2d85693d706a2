package main

import (
	"reflect"

	api "k8s.io/kubernetes/pkg/apis/core"
)

// root is the kubelet's internal Pod, whose UID hash nodelet reproduces
// for the static pods that kubelet started.
var root = reflect.TypeOf(api.Pod{})
