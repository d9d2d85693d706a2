package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/nodelet/nodelet/internal/testbed"
)

func main() {
	s, err := testbed.StartSystemd(context.Background())
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println(s.PID, s.Dir)
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt)
	<-c
	fmt.Println(s.Stop())
}
