// Package cmdflags owns the flags the es-changefeed commands share and
// what they become: the feed's Redis (--redis and its TLS, password and
// Sentinel flags) and a cluster (--es and its auth, TLS and secret-file
// flags, under a prefix such as --bulk-es), connecting to either with an
// error that names the flag to fix, usage errors (exit 2), and the advice
// main gives for the libraries' typed errors (Explain). Only package main
// imports it; it sits in main's layer of docs/DESIGN.md §1.
package cmdflags
