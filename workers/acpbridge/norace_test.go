//go:build !race

package acpbridge_test

// raceDetector: see race_test.go.
const raceDetector = false
