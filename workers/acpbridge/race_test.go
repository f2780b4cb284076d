//go:build race

package acpbridge_test

// raceDetector: the test binary, and so the bridge it runs, has the race
// detector's instrumentation (TestBurstOfChunks).
const raceDetector = true
