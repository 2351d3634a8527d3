"""What an image-text model (CLIP, SigLIP) is, for embed and classify --labels."""
