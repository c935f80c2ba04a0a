"""Named experiments of the LLM-in-the-loop entry points (``experiment=NAME``): one Hydra search
path per entry point, so a name belongs to one entry point and is refused by the other."""
