"""What a job reads: dataset manifests, the recipes that write them, video decoding and frame sampling."""
