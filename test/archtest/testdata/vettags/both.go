package vettags

// Both is built with and without the e2e tag.
const Both = 1
