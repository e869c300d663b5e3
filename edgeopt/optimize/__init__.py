"""The model path ``edgeopt optimize`` runs: plan -> passes -> export -> evaluate -> bundle."""
