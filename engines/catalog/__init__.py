"""The experiments folder: definitions, their loader, hosts and patch sets as the catalog reads them."""
