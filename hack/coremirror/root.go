package main

import (
	"reflect"

	v1 "k8s.io/api/core/v1"
)

// root is the type mirrored with every type of its package it reaches:
// v1's Pod, which v1.37's internal Pod matches field for field.
var root = reflect.TypeOf(v1.Pod{})
