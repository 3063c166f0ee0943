package main

//go:generate go tool outboxgen events.yaml
