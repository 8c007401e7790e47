"""What other programs use to talk to the catalog: the DBP node library and discovery."""
