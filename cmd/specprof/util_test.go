package main

import (
	"errors"
	"strconv"
	"sync"
)

var (
	binOnce sync.Once
	binPath string
)

func itoa(i int) string { return strconv.Itoa(i) }

func atoi(s string) int { i, _ := strconv.Atoi(s); return i }

func errorsAs(err error, target any) bool { return errors.As(err, target) }
