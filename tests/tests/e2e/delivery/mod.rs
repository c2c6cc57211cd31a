mod modes;
