"""Tests of scheduler/gateways/kube/, laid out as the source is."""
