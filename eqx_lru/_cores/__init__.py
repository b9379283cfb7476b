"""The recurrent cores: the abstract contract, the LRU in its two forms and its
initialisation, the RG-LRU, time steps and discretisations."""
