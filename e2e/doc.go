// Package e2e holds dashgate's end-to-end tests: the real binary, a real
// Chromium driven by chromedp, a real nginx. Only _test.go files live here.
package e2e
