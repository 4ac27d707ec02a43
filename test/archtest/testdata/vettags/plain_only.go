//go:build !e2e

package vettags

// Plain is built only without the e2e tag: what TestVetWithE2ESeesEveryFile must find.
const Plain = 1
